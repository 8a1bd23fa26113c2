"""What `paratune resume` says besides its progress display: each budget change `--set` made,
and each trial it re-attached (a trial that outlived the controller before it), a line each."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.common import console
from orchestrator.cli.live_display import CampaignProgress
from orchestrator.record.journal import TrialRecord
from orchestrator.scheduling.loop import EventHook


def say_budget_changes(campaign: str, changes: list[tuple[str, Any, Any]]) -> None:
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
