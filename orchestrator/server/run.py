"""Serving: the API on uvicorn, with the supervisor started and stopped by the app's lifespan.
SIGTERM or Ctrl-C stops the service the graceful way: controllers detach, trials keep running,
the next start resumes every campaign, and a last line says so.

The listening socket is bound before the lifespan starts the supervisor: uvicorn runs the
lifespan before it binds, and a service whose port turns out to be taken would otherwise have
adopted the running controllers and stopped them on its way out."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager

import uvicorn

from orchestrator.common.errors import UserError
from orchestrator.server.api import create_app
from orchestrator.server.config import ServiceConfig
from orchestrator.server.service import Service


def make_service(config: ServiceConfig, host: str, port: int, mlflow_ui: str | None = None,
                 lock_held: Callable[[], bool] = lambda: True) -> Service:
    # Controllers, views and trials all read the runs directory from here.
    os.environ["PARATUNE_RUNS_DIR"] = str(config.runs_dir.resolve())
    local = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return Service(config, base_url=f"http://{local}:{port}", mlflow_ui=mlflow_ui,
                   lock_held=lock_held)


def listen(host: str, port: int) -> socket.socket:
    """The API's listening socket, or a one-line error when the address is taken or wrong."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: not an address of this machine ({exc.strerror}); "
                        "give an IP address or a resolvable name") from None
    sock = socket.socket(family, kind, proto)  # not inherited by the controllers
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror}); "
                        "stop what uses that port (another paratune server?) or give another "
                        "--port") from None
    return sock


def serve(service: Service, sock: socket.socket) -> None:
    app = create_app(service)

    @asynccontextmanager
    async def lifespan(_app):
        service.supervisor.start()
        try:
            yield
        finally:
            service.supervisor.stop()
            service.db.dispose()
            # Here, not after run(): uvicorn raises the signal that stopped it again on its way
            # out, and SIGTERM's default action ends the process before run() returns.
            print(f"ParaTune service on {service.base_url} stopped: running trials keep running "
                  "and the next `paratune server` resumes their campaigns", file=sys.stderr,
                  flush=True)

    app.router.lifespan_context = lifespan
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
