"""What `paratune resume` says besides its progress display: each budget change `--set` made,
and each trial it re-attached (a trial that outlived the controller before it), a line each."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.common import console
from orchestrator.cli.live_display import CampaignProgress
from orchestrator.record.journal import TrialRecord
from orchestrator.scheduling.loop import EventHook


# The budget key that ended a campaign, by the start of its stop reason (record/budget.py).
BUDGET_KEYS = {"max_trials": "budget.max_trials", "gpu_hours": "budget.gpu_hours",
               "wall clock": "budget.wall_clock_s", "no improvement": "budget.patience"}


def extend_hint(campaign: str, stop_reason: str | None) -> str:
    """How to give a campaign its budget ended more of it, or "" for another ending."""
    key = next((k for start, k in BUDGET_KEYS.items() if (stop_reason or "").startswith(start)),
               None)
    return f"; extend it with `paratune resume {campaign} --set {key}=...`" if key else ""


def say_budget_changes(campaign: str, changes: list[tuple[str, Any, Any]]) -> None:
    """A line per budget value `resume --set` changed."""
    for key, old, new in changes:
        console.print(f"{campaign}: {key} {old} -> {new} (saved in its spec.yaml, journaled)",
                      markup=False, highlight=False, soft_wrap=True)


def saying_reattached(progress: CampaignProgress) -> EventHook:
    """The progress display's hook, with a line for each trial the controller re-attached."""
    def on_event(kind: str, record: TrialRecord) -> None:
        if kind == "reattached":
            console.print(f"re-attached {record.trial_id}{running_as(record.handle)}",
                          markup=False, highlight=False, soft_wrap=True)
            kind = "submitted"  # to the display, a trial that runs
        progress.update(kind, record)
    return on_event


def running_as(handle: dict[str, Any]) -> str:
    """What a re-attached trial runs as, from its journaled handle, where the backend says."""
    if handle.get("slurm_job"):
        return f" (Slurm job {handle['slurm_job']})"
    if handle.get("ray_actor"):
        return f" (Ray actor {handle['ray_actor']})"
    return f" (launcher PID {handle['pid']})" if handle.get("pid") else ""
