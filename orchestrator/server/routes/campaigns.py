"""/api/campaigns: submit, list, describe and cancel campaigns. The API writes only the
service's own records (a submitted campaign, a cancel request); the supervisor acts on them."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import select

from orchestrator.common.errors import UserError, one_line
from orchestrator.server.db import CANCELLED, QUEUED, RUNNING, Campaign, User
from orchestrator.server.quotas import refusal
from orchestrator.server.routes.dependencies import campaign_row, current_user, service_of
from orchestrator.server.service import Service
from orchestrator.server.submission import read_submission, resolved_yaml
from orchestrator.server.trust import code_in, may_run_code, may_see, may_submit_to
from orchestrator.campaign_spec import CampaignSpec

router = APIRouter(prefix="/api/campaigns")


class Submission(BaseModel):
    spec_yaml: str = Field(max_length=1 << 20, description="the campaign YAML, as a file holds it")
    set: list[Annotated[str, Field(max_length=1 << 16)]] = Field(
        default_factory=list, max_length=256, description="`a.b=value` overrides")
    priority: int = Field(default=0, ge=-1000, le=1000, description="higher starts first")
    project: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    workdir: str | None = Field(default=None, max_length=4096,
                                description="where relative trial paths start")


@router.post("", status_code=201)
def submit(body: Submission, me: User = Depends(current_user),
           service: Service = Depends(service_of)):
    notes: list[str] = []  # what `paratune run` would note about the space, for the client
    spec = _checked_spec(body, me, service, notes)
    simulated = spec.backend.kind == "simulated"  # a rehearsal: no quota counts it
    with service.admission, service.db.session() as s:  # the quota read and the insert: one
        refused = None if simulated else refusal(s, me.name, body.project,
                                                 spec.budget.gpu_hours, service.used_gpu_hours)
        if refused:
            raise HTTPException(403, one_line(refused))
        if s.get(Campaign, spec.name) or (service.config.runs_dir / spec.name).exists():
            raise HTTPException(409, f"campaign {spec.name!r} exists; choose another name "
                                     "(--set name=...)")
        row = Campaign(name=spec.name, owner=me.name, project=body.project,
                       priority=body.priority, state=QUEUED, spec_yaml=resolved_yaml(spec),
                       submitted_at=time.time(), max_trials=spec.budget.max_trials,
                       max_concurrent=spec.budget.max_concurrent,
                       gpu_hours_budget=spec.budget.gpu_hours, simulated=simulated)
        s.add(row)
    return {**service.describe(row), "notes": notes}


def _checked_spec(body: Submission, me: User, service: Service,
                  notes: list[str]) -> CampaignSpec:
    """The submitted spec, once the caller may submit all it asks for (403 naming the first
    key that takes a grant) and it passes the checks `paratune run` makes (422); `notes`
    collects what those checks note about its space."""
    if body.project and not may_submit_to(service.db, me, body.project):
        raise HTTPException(403, f"project {body.project!r} takes campaigns from its members; "
                                 "ask an admin to add you (`paratune server member add`)")
    try:
        data = read_submission(body.spec_yaml, body.set)
        trusted = may_run_code(service.db, me, body.project)
        needs_grant = [] if trusted else code_in(data, body.workdir)
        if needs_grant:
            raise HTTPException(403, one_line(
                f"{needs_grant[0]}: running programs or reading files of your own on this "
                "service takes a code grant (`paratune server grant --user NAME`, by an admin); "
                "without one, name presets and the built-in trainer only"))
        spec = service.parse(data, body.workdir,
                             None if trusted else service.config.trial_workdir, notes)
    except UserError as exc:
        raise HTTPException(422, one_line(str(exc))) from None
    source = spec.search.warm_start
    if source and not _visible(service, me, source):
        raise HTTPException(403, f"search.warm_start: no campaign {source!r} you may read on "
                                 "this server; name one of yours (`paratune ls`)")
    return spec


def _visible(service: Service, me: User, name: str) -> bool:
    with service.db.session() as s:
        row = s.get(Campaign, name)
    return row is not None and may_see(service.db, me, row)


@router.get("")
async def campaigns(me: User = Depends(current_user), service: Service = Depends(service_of)):
    with service.db.session() as s:
        rows = s.scalars(select(Campaign).order_by(Campaign.submitted_at)).all()
    return {"campaigns": [service.describe(r) for r in rows if may_see(service.db, me, r)]}


@router.get("/{name}")
async def campaign(name: str, me: User = Depends(current_user),
                   service: Service = Depends(service_of)):
    return service.describe(campaign_row(service, name, me))


@router.post("/{name}/cancel")
def cancel(name: str, me: User = Depends(current_user), service: Service = Depends(service_of)):
    with service.db.session() as s:
        row = s.get(Campaign, name)
        if row is None or not may_see(service.db, me, row):
            raise HTTPException(404, f"no campaign {name!r} on this server; see `paratune ls`")
        if row.owner != me.name and not me.admin:
            raise HTTPException(403, f"campaign {name!r} belongs to {row.owner!r}; only they "
                                     "or an admin may cancel it")
        if row.state == QUEUED:
            row.state, row.reason, row.ended_at = CANCELLED, "cancelled before it started", time.time()
        elif row.state == RUNNING:
            row.cancel_requested, row.reason = True, "cancelling: stopping its trials"
    return service.describe(row)
