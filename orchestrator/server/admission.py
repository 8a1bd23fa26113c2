"""Whether a queued campaign may still start, asked by the supervisor just before it starts
the controller: what held when it was submitted may have been taken back while it waited.

A campaign does not start once its owner holds no token (an admin revoked them: `paratune
server token revoke`, or deleted the user), once its spec needs a code grant its owner no
longer has (`paratune server grant --revoke`), or once a quota applies to it and it has no
`budget.gpu_hours` to be held to.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.server.config import ServiceConfig
from orchestrator.server.db import Campaign, Database, Token, User
from orchestrator.server.quotas import refusal
from orchestrator.server.trust import code_in, may_run_code
from orchestrator.campaign_spec.yaml_input import load_yaml_text


def start_refusal(s: Session, db: Database, config: ServiceConfig, row: Campaign) -> str | None:
    """Why the queued campaign `row` may not start now (one line), or None."""
    owner = s.get(User, row.owner)
    if owner is None or s.scalar(select(Token.digest).where(Token.user == row.owner)
                                 .limit(1)) is None:
        return (f"not started: its owner {row.owner!r} holds no token on this server any more "
                "(revoked while it was queued); with a new token they may submit it again")
    needs_grant = code_needed(row.spec_yaml, config)
    if needs_grant and not may_run_code(db, owner, row.project):
        return (f"not started: {needs_grant[0]} takes a code grant, and {row.owner!r} lost theirs "
                "while it was queued; an admin may grant it again (`paratune server grant`) "
                "before it is submitted again")
    if row.gpu_hours_budget is None and not row.simulated:
        unbounded = refusal(s, row.owner, row.project, None, lambda _campaign: 0.0)
        if unbounded:
            return f"not started: {unbounded}"
    return None


def code_needed(spec_yaml: str, config: ServiceConfig) -> list[str]:
    """What in a queued spec (as the service resolved it) takes a code grant. The service's
    own working folder, where the trials of users without a grant run, is not the user's."""
    data = load_yaml_text(spec_yaml, "queued spec")
    trial = data.get("trial") if isinstance(data.get("trial"), dict) else {}
    pinned = trial.get("workdir") == str(config.trial_workdir)
    return [key for key in code_in(data, None) if not (pinned and key == "trial.workdir")]
