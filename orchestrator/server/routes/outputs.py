"""What a campaign gives back over HTTP: its trials, its controller's log (or its tail), the
winner's launch file and the HTML report, read from the campaign's own files (the journal
through the campaign view)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import HTMLResponse, PlainTextResponse

from dashboards.report import render
from dashboards.report_data import report_data
from orchestrator.common.errors import UserError, one_line
from orchestrator.export import export, formats
from orchestrator.record.budget import gpu_hours
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import TrialRecord
from orchestrator.server.db import User
from orchestrator.server.routes.dependencies import campaign_row, current_user, service_of
from orchestrator.server.service import Service
from orchestrator.server.trust import redact_env
from orchestrator.tracking.view import varying_knobs

router = APIRouter(prefix="/api/campaigns/{name}")
LOG_CHUNK = 1 << 20
LOG_OFFSET_MAX = 1 << 62  # any larger offset is no position in a file (and overflows a seek)
ERROR_CHARS = 200  # of a failed trial's error, in the trial list


@router.get("/logs", response_class=PlainTextResponse)
def logs(name: str, offset: int = Query(0, ge=0, le=LOG_OFFSET_MAX),
         tail: int | None = Query(None, ge=1, le=LOG_CHUNK, description="the last bytes only"),
         me: User = Depends(current_user), service: Service = Depends(service_of)):
    """From byte `offset` (or the last `tail` bytes); an offset past the end reads nothing
    and answers the end."""
    row = campaign_row(service, name, me)
    data, path = b"", service.config.log_path(name)
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            offset = max(0, end - tail) if tail else min(offset, end)
            f.seek(offset)
            data = f.read(LOG_CHUNK)
    except FileNotFoundError:  # no controller has started yet
        offset = 0
    return PlainTextResponse(data.decode(errors="replace"), headers={
        "X-Log-Offset": str(offset + len(data)), "X-Campaign-State": row.state})


@router.get("/trials")
def trials(name: str, me: User = Depends(current_user), service: Service = Depends(service_of)):
    """The trials that ran, best first by the objective (then the rest by trial ID), with the
    knobs that vary between them; layouts pruned as infeasible only as a count."""
    campaign_row(service, name, me)
    view = service.progress.view(name)
    if view is None:
        return {"metric": None, "mode": None, "knobs": [], "trials": [], "pruned": 0}
    objective, records = view.objective, view.records()
    ran = [r for r in records if not r.pruned]
    ranked = objective.ranked(ran, lambda r: objective.value(r.result))
    shown = {r.trial_id for r in ranked}
    ordered = ranked + [r for r in ran if r.trial_id not in shown]
    return {"metric": objective.metric, "mode": objective.mode,
            "knobs": varying_knobs([r.config.to_params() for r in ran]),
            "trials": [_trial(r, objective.metric) for r in ordered],
            "pruned": len(records) - len(ran)}


def _trial(record: TrialRecord, metric: str) -> dict:
    result = record.result
    return {"trial_id": record.trial_id, "key": record.config.key(),
            "config": record.config.to_params(), "phase": record.phase,
            "status": result.status if result else "running",
            "value": result.metric(metric) if result and result.ok else None,
            "step_time_s": result.step_time_s if result else None,
            "peak_memory_gb": result.peak_memory_gb if result else None,
            "gpu_hours": gpu_hours(record) if result else None,
            "error": one_line(result.error, ERROR_CHARS) if result and result.error else None}


@router.get("/best", response_class=PlainTextResponse)
def best(name: str, format: str = "yaml", me: User = Depends(current_user),
         service: Service = Depends(service_of)):
    if format not in formats():
        raise HTTPException(422, f"format: unknown format {format!r}; choose one of "
                                 f"{', '.join(formats())}")
    row = campaign_row(service, name, me)
    view = service.progress.view(name)
    top = view.summary().best if view else None
    if top is None:
        raise HTTPException(409, f"campaign {name!r} has no successful trial yet")
    try:
        spec = view.spec if me.admin or me.name == row.owner else redact_env(view.spec)
        text = export(format, spec, top.trial_id, top.config, view.trial_dir(top.trial_id))
    except UserError as exc:  # a format this campaign cannot have (command without one)
        raise HTTPException(422, str(exc)) from None
    return PlainTextResponse(text)


@router.get("/report", response_class=HTMLResponse)
def report(name: str, me: User = Depends(current_user), service: Service = Depends(service_of)):
    row = campaign_row(service, name, me)
    view = service.progress.view(name)
    if view is None:
        raise HTTPException(409, f"campaign {name!r} has not started yet")
    if not (me.admin or me.name == row.owner):
        view = CampaignView(redact_env(view.spec))
    return HTMLResponse(render(report_data(view)))
