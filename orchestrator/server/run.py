"""Serving: the API on uvicorn, with the supervisor started and stopped by the app's lifespan.
SIGTERM or Ctrl-C stops the service the graceful way: controllers detach, trials keep running,
and the next start resumes every campaign."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

import uvicorn

from orchestrator.server.api import create_app
from orchestrator.server.config import ServiceConfig
from orchestrator.server.service import Service


def make_service(config: ServiceConfig, host: str, port: int,
                 mlflow_ui: str | None = None) -> Service:
    # Controllers, views and trials all read the runs directory from here.
    os.environ["PARATUNE_RUNS_DIR"] = str(config.runs_dir.resolve())
    local = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return Service(config, base_url=f"http://{local}:{port}", mlflow_ui=mlflow_ui)


def serve(service: Service, host: str, port: int) -> None:
    app = create_app(service)

    @asynccontextmanager
    async def lifespan(_app):
        service.supervisor.start()
        try:
            yield
        finally:
            service.supervisor.stop()
            service.db.dispose()

    app.router.lifespan_context = lifespan
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                  access_log=False)).run()
