"""The service's HTTP API (FastAPI): campaigns, their logs, launch files and reports, trial
slots and quotas, one router per resource (server/routes/). Every /api request carries a bearer
token, looked up on each request (a deleted token stops working at once); a body over 8 MiB is
refused before it is read (body_limit.py); errors are one line in `detail`.

The API writes only the service's own records (a submitted campaign, a cancel request, a
quota); the supervisor acts on them, and progress is read from the campaigns' journals.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from orchestrator.common.errors import one_line
from orchestrator.server.auth import Authenticator
from orchestrator.server.body_limit import BodyLimit
from orchestrator.server.routes import accounts, campaigns, outputs, slots
from orchestrator.server.service import Service

WEB_PAGE = Path(__file__).parent / "web" / "index.html"
CAMPAIGN_PAGE = Path(__file__).parent / "web" / "campaign.html"  # one campaign, from the API
PAGES_SCRIPT = Path(__file__).parent / "web" / "pages.js"  # what both pages share
PAGES_STYLE = Path(__file__).parent / "web" / "pages.css"


async def one_line_validation(_request: Request, exc: RequestValidationError):
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
    return JSONResponse({"detail": one_line(f"{where}: {first.get('msg')}")}, 422)


async def one_line_error(_request: Request, exc: HTTPException):
    return JSONResponse({"detail": one_line(str(exc.detail))}, exc.status_code,
                        headers=exc.headers)


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="ParaTune campaign service",
                  description="Submit, watch and cancel tuning campaigns on a shared cluster.")
    app.state.service = service
    app.state.authenticate = Authenticator(service.db)
    app.add_exception_handler(RequestValidationError, one_line_validation)
    app.add_exception_handler(HTTPException, one_line_error)
    app.add_middleware(BodyLimit)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page():
        return FileResponse(WEB_PAGE, media_type="text/html")

    @app.get("/pages.js", include_in_schema=False)
    def pages_script():
        return FileResponse(PAGES_SCRIPT, media_type="text/javascript")

    @app.get("/pages.css", include_in_schema=False)
    def pages_style():
        return FileResponse(PAGES_STYLE, media_type="text/css")

    @app.get("/campaigns/{name}", response_class=HTMLResponse, include_in_schema=False)
    def campaign_page(name: str):  # no data in it: the page asks the API, with the token
        return FileResponse(CAMPAIGN_PAGE, media_type="text/html")

    for router in (accounts.router, campaigns.router, outputs.router, slots.router):
        app.include_router(router)
    return app
