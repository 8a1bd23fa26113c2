"""`paratune server`: run the campaign service, and manage its users' tokens and quotas on the
service's own database (so the first admin token needs no server running)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import console, out
from orchestrator.common.errors import UserError
from orchestrator.common.paths import runs_root

server_app = typer.Typer(no_args_is_help=False, help="The campaign service and its users.")
token_app = typer.Typer(no_args_is_help=True, help="Users' API tokens.")
quota_app = typer.Typer(no_args_is_help=True, help="GPU-hour quotas.")
server_app.add_typer(token_app, name="token")
server_app.add_typer(quota_app, name="quota")

STATE_DIR = typer.Option(Path("paratune-server"), "--state-dir",
                         help="the service's database (SQLite), specs and controller logs")
DATABASE = typer.Option(None, "--database", envvar="PARATUNE_DATABASE_URL",
                        help="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db "
                             "(default: SQLite in --state-dir)")


def _config(state_dir: Path, database: Optional[str], runs_dir: Optional[Path] = None, **limits):
    """Runs go to --runs-dir, else $PARATUNE_RUNS_DIR, else STATE_DIR/runs."""
    from orchestrator.server.config import ServiceConfig

    runs = runs_root(runs_dir, configured=str(state_dir / "runs"))
    return ServiceConfig(state_dir=state_dir.resolve(), runs_dir=runs.resolve(),
                         database_url=database, **limits)


def _database(state_dir: Path, database: Optional[str]):
    from orchestrator.server.db import Database

    config = _config(state_dir, database)
    config.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return Database(config.url)
    except Exception as exc:
        raise UserError(f"--database: cannot open {config.url} ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); check the URL") from None


@server_app.callback(invoke_without_command=True)
def server(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (default: loopback)"),
    port: int = typer.Option(8470, "--port", help="1 to 65535"),
    state_dir: Path = STATE_DIR,
    database: Optional[str] = DATABASE,
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir",
                                            help="where campaigns run (default: STATE_DIR/runs)"),
    max_running: int = typer.Option(4, "--max-running", min=1, help="campaigns running at once"),
    max_trials: Optional[int] = typer.Option(None, "--max-trials", min=1,
                                             help="concurrent trials across all campaigns"),
    mlflow_ui: Optional[str] = typer.Option(None, "--mlflow-ui",
                                            help="URL of an MLflow UI over the runs' store"),
    run_as: Optional[str] = typer.Option(None, "--run-as",
                                         help="OS user campaigns' controllers and trials run "
                                              "as, kept out of the state directory (needs root)"),
) -> None:
    """Run the campaign service until SIGTERM or Ctrl-C (campaigns stay resumable)."""
    if ctx.invoked_subcommand is not None:
        return
    if not 1 <= port <= 65535:
        raise UserError(f"--port: {port} is not a TCP port; give 1 to 65535")
    from orchestrator.server.database_lock import DatabaseLock
    from orchestrator.server.state_lock import StateDirLock

    if run_as:  # what the service writes (its database first) is its own alone
        os.umask(0o077)
    config = _config(state_dir, database, runs_dir, max_running=max_running, max_trials=max_trials,
                     run_as=run_as)
    # A second server on this state directory or database, or on a taken port, stops here:
    # one line, and no controller adopted (and then stopped, or run twice) on its way out.
    with StateDirLock(config.state_dir):
        _database(state_dir, database).dispose()  # a bad URL is one line, before anything starts
        with DatabaseLock(config.url) as lock:
            _serve(config, host, port, mlflow_ui, lock)


def _serve(config, host: str, port: int, mlflow_ui: Optional[str], lock) -> None:
    from orchestrator.server.run import listen, make_service, serve

    sock = listen(host, port)
    try:
        service = make_service(config, host, port, mlflow_ui, lock.held)
    except BaseException:
        sock.close()
        raise
    url = page_url(host, port)
    console.print(f"ParaTune service on {url} (state {config.state_dir}, runs {config.runs_dir})",
                  markup=False, highlight=False, soft_wrap=True)
    console.print(signin_line(url), markup=False, highlight=False, soft_wrap=True)
    serve(service, sock)


def page_url(host: str, port: int) -> str:
    """The web page's address as a browser on this machine reaches it: a wildcard host listens
    on loopback too, and an IPv6 address goes in brackets."""
    shown = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


def signin_line(url: str) -> str:
    """How to sign in to the page. The service keeps tokens hashed, so it names none: the user
    puts the one `token create` showed them after `#token=`, which never leaves the browser."""
    return (f"sign in: open {url}#token=TOKEN with a token from `paratune server token create "
            "--user NAME` (or paste it into the page); the page keeps it in this browser")


@token_app.command("create")
def token_create(
    user: str = typer.Option(..., "--user", help="the user the token acts as"),
    admin: bool = typer.Option(False, "--admin", help="may cancel any campaign and set quotas"),
    state_dir: Path = STATE_DIR,
    database: Optional[str] = DATABASE,
) -> None:
    """Create a token (and the user, if new); it is shown once and stored hashed."""
    from orchestrator.server.auth import check_user_name, create_token

    check_user_name(user)
    db = _database(state_dir, database)
    try:
        out.print(create_token(db, user, admin), markup=False, highlight=False)
    finally:
        db.dispose()


@token_app.command("revoke")
def token_revoke(
    user: str = typer.Option(..., "--user", help="the user whose tokens to delete"),
    state_dir: Path = STATE_DIR,
    database: Optional[str] = DATABASE,
) -> None:
    """Delete every token of a user: the server refuses them from the next request on, and
    their queued campaigns do not start."""
    from orchestrator.server.auth import check_user_name, revoke_tokens

    check_user_name(user)
    db = _database(state_dir, database)
    try:
        count = revoke_tokens(db, user)
    finally:
        db.dispose()
    console.print(f"{count} token(s) of {user!r} revoked", markup=False, highlight=False)


@quota_app.command("set")
def quota_set(
    gpu_hours: float = typer.Option(..., "--gpu-hours", help="GPU-hours allowed (above 0)"),
    user: Optional[str] = typer.Option(None, "--user"),
    project: Optional[str] = typer.Option(None, "--project"),
    state_dir: Path = STATE_DIR,
    database: Optional[str] = DATABASE,
) -> None:
    """Set the GPU-hour quota of a user or a project."""
    from orchestrator.server.auth import check_user_name
    from orchestrator.server.quotas import PROJECT, USER, set_quota

    if (user is None) == (project is None):
        raise UserError("quota set: give exactly one of --user NAME or --project NAME")
    if not (math.isfinite(gpu_hours) and gpu_hours > 0):  # the API's bound too
        raise UserError(f"--gpu-hours: {gpu_hours:g} is not a quota; give a number of "
                        "GPU-hours above 0")
    scope, name = (USER, user) if user else (PROJECT, project)
    check_user_name(name)
    db = _database(state_dir, database)
    try:
        set_quota(db, scope, name, gpu_hours)
    finally:
        db.dispose()
    console.print(f"quota of {scope} {name!r}: {gpu_hours:g} GPU-hours", markup=False)
