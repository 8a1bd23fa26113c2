"""The service's HTTP API (FastAPI): campaigns, logs, launch files, reports, trial slots and
quotas. Every /api request carries a bearer token; errors are one line in `detail`.

The API writes only the service's own records (a submitted campaign, a cancel request, a
quota); the supervisor acts on them, and progress is read from the campaigns' journals.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from sqlalchemy import select

from dashboards.report import render
from dashboards.report_data import report_data
from orchestrator.common.errors import UserError, one_line
from orchestrator.export import FORMATS, export
from orchestrator.server.auth import Authenticator, digest
from orchestrator.server.db import CANCELLED, QUEUED, RUNNING, Campaign, User
from orchestrator.server.quotas import refusal, set_quota
from orchestrator.server.service import Service
from orchestrator.server.submission import parse_submission, resolved_yaml

WEB_PAGE = Path(__file__).parent / "web" / "index.html"
LOG_CHUNK = 1 << 20
LOG_OFFSET_MAX = 1 << 62  # any larger offset is no position in a file (and overflows a seek)


class Submission(BaseModel):
    spec_yaml: str = Field(max_length=1 << 20, description="the campaign YAML, as a file holds it")
    set: list[str] = Field(default_factory=list, description="`a.b=value` overrides")
    priority: int = Field(default=0, ge=-1000, le=1000, description="higher starts first")
    project: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    workdir: str | None = Field(default=None, description="where relative trial paths start")


class SlotAsk(BaseModel):
    holding: int = Field(ge=0)
    want: bool = True


class QuotaBody(BaseModel):
    scope: Literal["user", "project"]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    gpu_hours: float = Field(gt=0, allow_inf_nan=False, description="finite, above 0")


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="ParaTune campaign service",
                  description="Submit, watch and cancel tuning campaigns on a shared cluster.")
    bearer = HTTPBearer(auto_error=False)
    authenticate = Authenticator(service.db)

    # The polled paths (user, campaign, campaigns) are async: their work is a cache hit or one
    # short read, cheaper on the event loop than a hand-off to the thread pool.
    async def user(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> User:
        found = authenticate(credentials.credentials) if credentials else None
        if found is None:
            raise HTTPException(401, "missing or unknown token; create one with "
                                     "`paratune server token create --user NAME`",
                                headers={"WWW-Authenticate": "Bearer"})
        return found

    def campaign_row(name: str) -> Campaign:
        with service.db.session() as s:
            row = s.get(Campaign, name)
        if row is None:
            raise HTTPException(404, f"no campaign {name!r} on this server; see `paratune ls`")
        return row

    @app.exception_handler(RequestValidationError)
    async def one_line_validation(_request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
        return JSONResponse({"detail": one_line(f"{where}: {first.get('msg')}")}, 422)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page():
        return FileResponse(WEB_PAGE, media_type="text/html")

    @app.get("/api/whoami")
    async def whoami(me: User = Depends(user)):
        return {"user": me.name, "admin": me.admin}

    @app.post("/api/campaigns", status_code=201)
    def submit(body: Submission, me: User = Depends(user)):
        try:
            spec = parse_submission(body.spec_yaml, body.set, service.config.runs_dir, body.workdir)
        except UserError as exc:
            raise HTTPException(422, one_line(str(exc))) from None
        refused = refusal(service.db, me.name, body.project, spec.budget.gpu_hours,
                          service.used_gpu_hours)
        if refused:
            raise HTTPException(403, one_line(refused))
        with service.db.session() as s:
            if s.get(Campaign, spec.name) or (service.config.runs_dir / spec.name).exists():
                raise HTTPException(409, f"campaign {spec.name!r} exists; choose another name "
                                         "(--set name=...)")
            row = Campaign(name=spec.name, owner=me.name, project=body.project,
                           priority=body.priority, state=QUEUED, spec_yaml=resolved_yaml(spec),
                           submitted_at=time.time(), max_trials=spec.budget.max_trials,
                           max_concurrent=spec.budget.max_concurrent,
                           gpu_hours_budget=spec.budget.gpu_hours)
            s.add(row)
        return service.describe(row)

    @app.get("/api/campaigns")
    async def campaigns(_me: User = Depends(user)):
        with service.db.session() as s:
            rows = s.scalars(select(Campaign).order_by(Campaign.submitted_at)).all()
        return {"campaigns": [service.describe(r) for r in rows]}

    @app.get("/api/campaigns/{name}")
    async def campaign(name: str, _me: User = Depends(user)):
        return service.describe(campaign_row(name))

    @app.post("/api/campaigns/{name}/cancel")
    def cancel(name: str, me: User = Depends(user)):
        with service.db.session() as s:
            row = s.get(Campaign, name)
            if row is None:
                raise HTTPException(404, f"no campaign {name!r} on this server; see `paratune ls`")
            if row.owner != me.name and not me.admin:
                raise HTTPException(403, f"campaign {name!r} belongs to {row.owner!r}; only they "
                                         "or an admin may cancel it")
            if row.state == QUEUED:
                row.state, row.reason, row.ended_at = CANCELLED, "cancelled before it started", time.time()
            elif row.state == RUNNING:
                row.cancel_requested, row.reason = True, "cancelling: stopping its trials"
        return service.describe(row)

    @app.get("/api/campaigns/{name}/logs", response_class=PlainTextResponse)
    def logs(name: str, offset: int = Query(0, ge=0, le=LOG_OFFSET_MAX),
             _me: User = Depends(user)):
        """From byte `offset`; an offset past the end reads nothing and answers the end."""
        row = campaign_row(name)
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

    @app.get("/api/campaigns/{name}/best", response_class=PlainTextResponse)
    def best(name: str, format: str = "yaml", _me: User = Depends(user)):
        if format not in FORMATS:
            raise HTTPException(422, f"format: unknown format {format!r}; choose one of "
                                     f"{', '.join(FORMATS)}")
        campaign_row(name)
        view = service.progress.view(name)
        top = view.summary().best if view else None
        if top is None:
            raise HTTPException(409, f"campaign {name!r} has no successful trial yet")
        try:
            text = export(format, view.spec, top.trial_id, top.config,
                          view.trial_dir(top.trial_id))
        except UserError as exc:  # a format this campaign cannot have (command without one)
            raise HTTPException(422, str(exc)) from None
        return PlainTextResponse(text)

    @app.get("/api/campaigns/{name}/report", response_class=HTMLResponse)
    def report(name: str, _me: User = Depends(user)):
        campaign_row(name)
        view = service.progress.view(name)
        if view is None:
            raise HTTPException(409, f"campaign {name!r} has not started yet")
        return HTMLResponse(render(report_data(view)))

    @app.post("/api/slots/{name}")
    def slot(name: str, body: SlotAsk,
             credentials: HTTPAuthorizationCredentials | None = Depends(bearer)):
        row = campaign_row(name)
        if credentials is None or row.slot_digest != digest(credentials.credentials):
            raise HTTPException(401, "not this campaign's controller token")
        return {"granted": service.slots.ask(name, body.holding, body.want)}

    @app.post("/api/quotas")
    def quota(body: QuotaBody, me: User = Depends(user)):
        if not me.admin:
            raise HTTPException(403, "only an admin sets quotas")
        set_quota(service.db, body.scope, body.name, body.gpu_hours)
        return body.model_dump()

    @app.exception_handler(HTTPException)
    async def one_line_error(_request: Request, exc: HTTPException):
        return JSONResponse({"detail": one_line(str(exc.detail))}, exc.status_code,
                            headers=exc.headers)

    return app
