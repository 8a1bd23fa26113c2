"""GPU-hour quotas per user or per project, checked when a campaign is submitted.

A campaign counts against a quota with what it used once it has ended, and with the larger of
its `budget.gpu_hours` and what it used while it is queued or running: the budget is what it
may still spend, so admitting it reserves that much. Its controller keeps it within that budget
(each trial reserves its share before it starts, record/budget.py), so the quota bounds what it
spends, not only what it asks; a quota requires a budget of every campaign it applies to.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.record.budget import hours
from orchestrator.server.db import FINAL_STATES, Campaign, Database, Quota

USER, PROJECT = "user", "project"


def set_quota(db: Database, scope: str, name: str, gpu_hours: float) -> None:
    with db.session() as s:
        row = s.get(Quota, (scope, name))
        if row is None:
            s.add(Quota(scope=scope, name=name, gpu_hours=gpu_hours))
        else:
            row.gpu_hours = gpu_hours


def committed(campaign: Campaign, used: float) -> float:
    if campaign.state in FINAL_STATES:
        return used
    return max(campaign.gpu_hours_budget or 0.0, used)


def refusal(s: Session, owner: str, project: str | None, asked: float | None,
            used_by: Callable[[Campaign], float]) -> str | None:
    """Why a campaign of `owner` (in `project`) asking for `asked` GPU-hours cannot be
    admitted, naming the quota; None when every quota that applies has room. Read in the
    session that then inserts the campaign, with the quotas' rows locked (PostgreSQL; on
    SQLite the caller holds the admission lock), so concurrent submissions are admitted one
    after the other."""
    scopes = sorted([(USER, owner)] + ([(PROJECT, project)] if project else []))
    for scope, name in scopes:
        quota = s.scalars(select(Quota).where(Quota.scope == scope, Quota.name == name)
                          .with_for_update()).first()
        if quota is None:
            continue
        if asked is None:
            return (f"budget.gpu_hours: {scope} {name!r} has a quota of "
                    f"{quota.gpu_hours:g} GPU-hours; set budget.gpu_hours in the spec so the "
                    "campaign can be admitted against it")
        column = Campaign.owner if scope == USER else Campaign.project
        campaigns = s.scalars(select(Campaign).where(
            column == name, Campaign.simulated.isnot(True))).all()  # rehearsals spend no GPU
        taken = sum(committed(c, used_by(c)) for c in campaigns)
        if taken + asked > quota.gpu_hours:
            return (f"quota of {scope} {name!r}: {quota.gpu_hours:g} GPU-hours, "
                    f"{hours(taken)} used or reserved; this campaign asks for {asked:g} "
                    "(budget.gpu_hours): lower it, or ask an admin to raise the quota")
    return None
