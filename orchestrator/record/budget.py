"""Stop criteria of a campaign, computed from its journal: trials, wall clock, GPU-hours and
patience. `paratune status` shows what is used and what is left.

A trial's GPU-hours are its world size times its duration: the wall time between submission
and result, or the simulated duration a simulated trial reports. While trials run, the
controller counts what they have used so far against `budget.gpu_hours` too, so concurrent
trials do not all start on the same unspent hours; a budget can still be overshot by what
the trials running when it is reached use before they end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.record.best import BestSoFar, finish_order
from orchestrator.record.journal import TrialRecord


def executed(records: list[TrialRecord]) -> list[TrialRecord]:
    """Trials that took (or are taking) backend time; infeasible ones were never run."""
    return [r for r in records if not (r.result and r.result.status == "infeasible")]


def gpu_hours(record: TrialRecord) -> float:
    if record.result is None:
        return 0.0
    duration = record.result.extra.get("simulated_duration_s", record.duration_s) or 0.0
    world = record.result.world_size or record.config.world_size
    return world * duration / 3600


def running_gpu_hours(records, now: float) -> float:
    """GPU-hours the running `records` (submitted, no result yet) have used until `now`."""
    return sum(r.config.world_size * max(0.0, now - r.submitted_at) / 3600 for r in records
               if r.result is None and r.submitted_at is not None)


class Tally:
    """Running totals of what a campaign has spent, updated per trial (no rescans)."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.trials = 0
        self.gpu_hours = 0.0
        self.best = BestSoFar(objective)
        self.since_improvement = 0

    @classmethod
    def of(cls, records: list[TrialRecord], objective: Objective) -> "Tally":
        tally = cls(objective)
        for record in records:  # what was submitted, whether it has ended or not
            if record.result is None or record.result.status != "infeasible":
                tally.submitted()
        for record in finish_order(records):  # patience as the live campaign counted it
            tally.finished(record)
        return tally

    def submitted(self) -> None:
        self.trials += 1

    def finished(self, record: TrialRecord) -> None:
        if record.result is None or record.result.status == "infeasible":
            return
        self.gpu_hours += gpu_hours(record)
        if self.best.add(record):
            self.since_improvement = 0
        else:
            self.since_improvement += 1

    def state(self, budget, started_at: float, pending: int = 0,
              running_gpu_hours: float = 0.0) -> "BudgetState":
        """Spent and left of `budget` (the spec's section), counting `pending` trials that are
        about to be submitted as if they were, and what running trials used so far."""
        return BudgetState(
            trials=self.trials + pending, max_trials=budget.max_trials, gpu_hours=self.gpu_hours,
            max_gpu_hours=budget.gpu_hours, elapsed_s=time.time() - started_at,
            wall_clock_s=budget.wall_clock_s, since_improvement=self.since_improvement,
            patience=budget.patience, running_gpu_hours=running_gpu_hours,
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
    running_gpu_hours: float = 0.0  # used so far by trials still running (the controller's)

    @property
    def trials_left(self) -> int:
        return max(0, self.max_trials - self.trials)

    def exhausted(self) -> str | None:
        """Why no further trial may start, or None."""
        if self.trials >= self.max_trials:
            return f"max_trials {self.max_trials} reached"
        used = self.gpu_hours + self.running_gpu_hours
        if self.max_gpu_hours is not None and used >= self.max_gpu_hours:
            running = (f" ({self.running_gpu_hours:.3g} by running trials)"
                       if self.running_gpu_hours else "")
            return f"gpu_hours {used:.3g}{running} >= budget {self.max_gpu_hours:g}"
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
