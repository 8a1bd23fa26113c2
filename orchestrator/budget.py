"""Stop criteria of a campaign, computed from its journal: trials, wall clock, GPU-hours and
patience. `paratune status` shows what is used and what is left.

A trial's GPU-hours are its world size times its duration: the wall time between submission
and result, or the simulated duration a simulated trial reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from orchestrator.journal import TrialRecord
from orchestrator.objective import Objective


def executed(records: list[TrialRecord]) -> list[TrialRecord]:
    """Trials that took (or are taking) backend time; infeasible ones were never run."""
    return [r for r in records if not (r.result and r.result.status == "infeasible")]


def gpu_hours(record: TrialRecord) -> float:
    if record.result is None:
        return 0.0
    duration = record.result.extra.get("simulated_duration_s", record.duration_s) or 0.0
    world = record.result.world_size or record.config.world_size
    return world * duration / 3600


class Tally:
    """Running totals of what a campaign has spent, updated per trial (no rescans)."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.trials = 0
        self.gpu_hours = 0.0
        self.best: float | None = None
        self.since_improvement = 0

    @classmethod
    def of(cls, records: list[TrialRecord], objective: Objective) -> "Tally":
        tally = cls(objective)
        for record in sorted(records, key=lambda r: r.trial_id):
            if record.result is None or record.result.status != "infeasible":
                tally.submitted()
            if record.result is not None:
                tally.finished(record)
        return tally

    def submitted(self) -> None:
        self.trials += 1

    def finished(self, record: TrialRecord) -> None:
        if record.result is None or record.result.status == "infeasible":
            return
        self.gpu_hours += gpu_hours(record)
        value = self.objective.value(record.result)
        if self.objective.better(value, self.best):
            self.best, self.since_improvement = value, 0
        else:
            self.since_improvement += 1

    def state(self, budget, started_at: float, pending: int = 0) -> "BudgetState":
        """Spent and left of `budget` (the spec's section), counting `pending` trials that are
        about to be submitted as if they were."""
        return BudgetState(
            trials=self.trials + pending, max_trials=budget.max_trials, gpu_hours=self.gpu_hours,
            max_gpu_hours=budget.gpu_hours, elapsed_s=time.time() - started_at,
            wall_clock_s=budget.wall_clock_s, since_improvement=self.since_improvement,
            patience=budget.patience,
        )


@dataclass(frozen=True)
class BudgetState:
    trials: int
    max_trials: int
    gpu_hours: float
    max_gpu_hours: float | None
    elapsed_s: float
    wall_clock_s: float | None
    since_improvement: int
    patience: int | None

    @property
    def trials_left(self) -> int:
        return max(0, self.max_trials - self.trials)

    def exhausted(self) -> str | None:
        """Why no further trial may start, or None."""
        if self.trials >= self.max_trials:
            return f"max_trials {self.max_trials} reached"
        if self.max_gpu_hours is not None and self.gpu_hours >= self.max_gpu_hours:
            return f"gpu_hours {self.gpu_hours:.3g} >= budget {self.max_gpu_hours:g}"
        if self.wall_clock_s is not None and self.elapsed_s >= self.wall_clock_s:
            return f"wall clock {self.elapsed_s:.0f} s >= budget {self.wall_clock_s:g} s"
        if self.patience is not None and self.since_improvement >= self.patience:
            return f"no improvement in {self.since_improvement} trials (patience {self.patience})"
        return None

    def to_dict(self) -> dict[str, Any]:
        left = lambda used, cap: None if cap is None else max(0.0, cap - used)  # noqa: E731
        return {
            "trials": self.trials, "max_trials": self.max_trials,
            "trials_left": self.trials_left,
            "gpu_hours": self.gpu_hours, "gpu_hours_left": left(self.gpu_hours, self.max_gpu_hours),
            "elapsed_s": self.elapsed_s, "wall_clock_left_s": left(self.elapsed_s, self.wall_clock_s),
            "since_improvement": self.since_improvement, "patience": self.patience,
            "exhausted": self.exhausted(),
        }
