"""`paratune server grant` and `paratune server member`: who may run their own code on the
service, and who belongs to a project (sees its campaigns, shares its grant), written to the
service's database directly, as tokens and quotas are."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import console
from orchestrator.cli.service import DATABASE, STATE_DIR, _database
from orchestrator.common.errors import UserError


def grant(
    user: Optional[str] = typer.Option(None, "--user"),
    project: Optional[str] = typer.Option(None, "--project", help="every member of it"),
    revoke: bool = typer.Option(False, "--revoke", help="take the grant back"),
    state_dir: Path = STATE_DIR,
    database: Optional[str] = DATABASE,
) -> None:
    """Let a user (or a project's members) run programs of their own: trial.command,
    trainer scripts, tracking.uri, model and cluster files, a working folder."""
    from orchestrator.server.auth import check_user_name
    from orchestrator.server.trust import PROJECT, USER, set_code_grant

    if (user is None) == (project is None):
        raise UserError("grant: give exactly one of --user NAME or --project NAME")
    scope, name = (USER, user) if user else (PROJECT, project)
    check_user_name(name)
    _on_database(state_dir, database, lambda db: set_code_grant(db, scope, name, not revoke))
    said = "may no longer" if revoke else "may now"
    console.print(f"{scope} {name!r} {said} run programs of its own on the service", markup=False)


def member(
    project: str = typer.Option(..., "--project"),
    user: str = typer.Option(..., "--user"),
    remove: bool = typer.Option(False, "--remove", help="take the user out of the project"),
    state_dir: Path = STATE_DIR,
    database: Optional[str] = DATABASE,
) -> None:
    """Add a user to a project: they see its campaigns and share its code grant; a project
    with members takes campaigns from its members only."""
    from orchestrator.server.auth import check_user_name
    from orchestrator.server.trust import set_member

    check_user_name(project)
    check_user_name(user)
    _on_database(state_dir, database, lambda db: set_member(db, project, user, not remove))
    console.print(f"{user!r} {'left' if remove else 'is a member of'} project {project!r}",
                  markup=False)


def _on_database(state_dir: Path, database: Optional[str], write) -> None:
    """Run `write(db)` on the service's database, closed after."""
    db = _database(state_dir, database)
    try:
        write(db)
    finally:
        db.dispose()
