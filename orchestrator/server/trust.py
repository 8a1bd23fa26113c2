"""Who may do what on the service: the trust boundary between its users and itself.

Submitting a campaign runs programs. Users without a code grant submit specs that name only
presets, the built-in trainer and the service's tracking store; their trials run the service's
own program from a folder the service chooses, with an environment limited to tuning
variables. Running one's own code (`trial.command`, a trainer script, a tracking URI, a model
or cluster file, a working folder, Slurm setup lines) takes a grant an admin gives a user or a
project. A campaign is seen by its owner, its project's members and admins.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from orchestrator.server.db import Campaign, CodeGrant, Database, ProjectMember, User
from orchestrator.server.trial_env import TUNING_ENV
from orchestrator.trainers.registry import adapter, names, sections

USER, PROJECT = "user", "project"
REDACTED = "<redacted>"


def may_run_code(db: Database, user: User, project: str | None) -> bool:
    if user.admin:
        return True
    with db.session() as s:
        if s.get(CodeGrant, (USER, user.name)):
            return True
        return bool(project and s.get(CodeGrant, (PROJECT, project))
                    and s.get(ProjectMember, (project, user.name)))


def may_see(db: Database, user: User, row: Campaign) -> bool:
    """The owner, an admin, or a member of the campaign's project."""
    if user.admin or row.owner == user.name:
        return True
    if not row.project:
        return False
    with db.session() as s:
        return s.get(ProjectMember, (row.project, user.name)) is not None


def may_submit_to(db: Database, user: User, project: str) -> bool:
    """A project with members takes campaigns from its members only."""
    with db.session() as s:
        members = s.scalars(select(ProjectMember.user).where(ProjectMember.project == project)).all()
    return user.admin or not members or user.name in members


def code_in(data: dict[str, Any], client_workdir: str | None) -> list[str]:
    """The keys of a submitted spec (as read, overrides applied) that run or read what the
    user chooses on the service's machine; empty when the spec names only what the service
    provides."""
    found = [f"{key}: a file" for key in ("model", "cluster") if _names_a_file(data.get(key))]
    tracking, trial, backend = (_section(data, k) for k in ("tracking", "trial", "backend"))
    if tracking.get("uri"):
        found.append("tracking.uri")
    # A program to run first (trial.command), then where trials run, then trainers' sections.
    for key in ("command", "workdir", *[k for k in trainer_keys() if k != "command"]):
        if trial.get(key):
            found.append(f"trial.{key}")
    trainer = trial.get("trainer")
    if trainer is not None and (trainer not in names() or adapter(trainer).runs_a_program):
        found.append("trial.trainer")
    env = trial.get("env") if isinstance(trial.get("env"), dict) else {}
    found += [f"trial.env.{name}" for name in env if str(name) not in TUNING_ENV]
    found += [f"backend.{key}" for key in ("setup", "sbatch_args", "address") if backend.get(key)]
    return found


def trainer_keys() -> list[str]:
    """The `trial` keys a trainer reads its program, config or arguments from (sections such
    as trial.deepspeed, a command's trial.command), every registered trainer's."""
    keys = [key for name in names() for key in adapter(name).trial_keys[:1]]
    named = [name.replace("-", "_") for name in names()]
    return list(dict.fromkeys(keys + list(sections()) + named))


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _names_a_file(value: Any) -> bool:
    if isinstance(value, dict):
        value = value.get("preset")
    return isinstance(value, str) and (value.endswith((".yaml", ".yml")) or "/" in value)


def redact_env(spec: Any) -> Any:
    """The spec with its trial's environment values hidden (for readers other than the owner)."""
    if not spec.trial.env:
        return spec
    trial = spec.trial.model_copy(update={"env": {k: REDACTED for k in spec.trial.env}})
    return spec.model_copy(update={"trial": trial})


def set_code_grant(db: Database, scope: str, name: str, granted: bool = True) -> None:
    _set_row(db, CodeGrant, {"scope": scope, "name": name}, granted)


def set_member(db: Database, project: str, user: str, member: bool = True) -> None:
    _set_row(db, ProjectMember, {"project": project, "user": user}, member)


def _set_row(db: Database, table: type, key: dict[str, str], present: bool) -> None:
    """Add the row `key` names to `table`, or remove it; nothing when it already is so."""
    with db.session() as s:
        row = s.get(table, tuple(key.values()))
        if present and row is None:
            s.add(table(**key))
        elif not present and row is not None:
            s.delete(row)
