"""What a campaign gives back over HTTP: its controller's log, the winner's launch file and the
HTML report, read from the campaign's own files (the journal through the campaign view)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import HTMLResponse, PlainTextResponse

from dashboards.report import render
from dashboards.report_data import report_data
from orchestrator.common.errors import UserError
from orchestrator.export import FORMATS, export
from orchestrator.record.campaign import CampaignView
from orchestrator.server.db import User
from orchestrator.server.routes.dependencies import campaign_row, current_user, service_of
from orchestrator.server.service import Service
from orchestrator.server.trust import redact_env

router = APIRouter(prefix="/api/campaigns/{name}")
LOG_CHUNK = 1 << 20
LOG_OFFSET_MAX = 1 << 62  # any larger offset is no position in a file (and overflows a seek)


@router.get("/logs", response_class=PlainTextResponse)
def logs(name: str, offset: int = Query(0, ge=0, le=LOG_OFFSET_MAX),
         me: User = Depends(current_user), service: Service = Depends(service_of)):
    """From byte `offset`; an offset past the end reads nothing and answers the end."""
    row = campaign_row(service, name, me)
    data, path = b"", service.config.log_path(name)
    try:
        with open(path, "rb") as f:
            offset = min(offset, f.seek(0, os.SEEK_END))
            f.seek(offset)
            data = f.read(LOG_CHUNK)
    except FileNotFoundError:  # no controller has started yet
        offset = 0
    return PlainTextResponse(data.decode(errors="replace"), headers={
        "X-Log-Offset": str(offset + len(data)), "X-Campaign-State": row.state})


@router.get("/best", response_class=PlainTextResponse)
def best(name: str, format: str = "yaml", me: User = Depends(current_user),
         service: Service = Depends(service_of)):
    if format not in FORMATS:
        raise HTTPException(422, f"format: unknown format {format!r}; choose one of "
                                 f"{', '.join(FORMATS)}")
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
