"""Stop criteria of a campaign, computed from its journal: trials, wall clock, GPU-hours and
patience. `paratune status` shows what is used, reserved and left.

A trial's GPU-hours are its world size times its duration: the wall time between submission
and result, or the simulated duration a simulated trial reports. Under `budget.gpu_hours` a
trial reserves what it may use before it starts (`reservation`): its world size times
`trial.timeout_s`, where it is stopped; a simulated trial twice the cost model's predicted
duration (the simulated backend stops no trial at its timeout), or the timeout when that is
longer and failures are simulated (a simulated hang holds its devices until then). While it
runs a trial holds the larger of its reservation and what it has used so far; once it ends,
what it used replaces the reservation. A trial whose reservation does not fit in what is left
waits for the running trials to settle, and is not started when none runs: a campaign spends
at most its budget, unless a trial outruns its reservation (one stopped late after its
timeout, a Slurm job whose queue wait counts in its duration, a simulated trial slower than
twice its prediction).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel
from orchestrator.record.best import BestSoFar, finish_order
from orchestrator.record.journal import SCREEN, TrialRecord

# A simulated trial reserves this many times its predicted duration: its measured speed
# differs from the model's by the backend's noise, perturbation and quirks.
SIMULATED_MARGIN = 2.0


def hours(value: float) -> str:
    """GPU-hours as people read them: 6,770 rather than 6.77e+03."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def executed(records: list[TrialRecord]) -> list[TrialRecord]:
    """Trials that took (or are taking) backend time; infeasible ones were never run."""
    return [r for r in records if not (r.result and r.result.status == "infeasible")]


def simulated(record: TrialRecord) -> bool:
    """Run by the simulated backend (its handle says so; a trial's own report cannot)."""
    return bool(record.handle.get("simulated"))


def gpu_hours(record: TrialRecord) -> float:
    """World size times duration. The world size is the layout's, the devices it held; a
    simulated duration counts only for a simulated trial, so no trial program can report its
    own cost down."""
    if record.result is None:
        return 0.0
    duration = record.duration_s or 0.0
    if simulated(record):
        duration = record.result.extra.get("simulated_duration_s", duration) or 0.0
    return record.config.world_size * duration / 3600


@dataclass(frozen=True)
class Reservation:
    """What a trial reserves of `budget.gpu_hours` before it starts, and how it was reckoned."""

    gpu_hours: float
    reckoning: str  # "2 GPUs x trial.timeout_s 180 s"
    fix: str = "raise budget.gpu_hours or lower trial.timeout_s"


def reservation(spec, record: TrialRecord, cost_model: CostModel) -> Reservation:
    """`record`'s reservation under `spec` (a CampaignSpec); `cost_model` predicts a simulated
    trial's duration."""
    world, timeout = record.config.world_size, spec.trial.timeout_s
    by_timeout = Reservation(world * timeout / 3600,
                             f"{world} GPUs x trial.timeout_s {timeout:g} s")
    if spec.backend.kind != "simulated":
        return by_timeout
    steps = spec.search.fidelity.screening_steps if record.phase == SCREEN else spec.trial.steps
    predicted = cost_model.estimate(record.config).step_time_s * steps
    if not (math.isfinite(predicted) and predicted > 0):
        return by_timeout
    seconds = SIMULATED_MARGIN * predicted
    if spec.backend.failure_rate > 0 and timeout > seconds:
        return by_timeout  # a simulated hang holds its devices until the timeout
    return Reservation(world * seconds / 3600,
                       f"{world} GPUs x {SIMULATED_MARGIN:g} x the predicted {predicted:,.0f} s",
                       "raise budget.gpu_hours")


def held_gpu_hours(running: Iterable[tuple[TrialRecord, float]], now: float) -> float:
    """What running trials hold of the budget: each its reservation (the float beside it), or
    what it has used until `now` once that is more (a simulated trial's wall time is not what
    it uses)."""
    held = 0.0
    for record, reserved in running:
        used = 0.0
        if record.submitted_at is not None and not simulated(record):
            used = record.config.world_size * max(0.0, now - record.submitted_at) / 3600
        held += max(reserved, used)
    return held


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
              reserved_gpu_hours: float = 0.0) -> "BudgetState":
        """Spent and left of `budget` (the spec's section), counting `pending` trials that are
        about to be submitted as if they were, and what running trials hold of the GPU-hours."""
        return BudgetState(
            trials=self.trials + pending, max_trials=budget.max_trials, gpu_hours=self.gpu_hours,
            max_gpu_hours=budget.gpu_hours, elapsed_s=time.time() - started_at,
            wall_clock_s=budget.wall_clock_s, since_improvement=self.since_improvement,
            patience=budget.patience, reserved_gpu_hours=reserved_gpu_hours,
        )


@dataclass(frozen=True)
class BudgetState:
    trials: int
    max_trials: int
    gpu_hours: float  # used by the trials that have ended
    max_gpu_hours: float | None
    elapsed_s: float
    wall_clock_s: float | None
    since_improvement: int
    patience: int | None
    reserved_gpu_hours: float = 0.0  # held by running trials (`held_gpu_hours`)

    @property
    def trials_left(self) -> int:
        return max(0, self.max_trials - self.trials)

    @property
    def gpu_hours_left(self) -> float | None:
        """What a trial may still reserve: neither used nor held."""
        if self.max_gpu_hours is None:
            return None
        return max(0.0, self.max_gpu_hours - self.gpu_hours - self.reserved_gpu_hours)

    def exhausted(self) -> str | None:
        """Why no further trial may start, or None. Running trials' reservations do not end
        a campaign: what they leave unused comes back when they end."""
        if self.trials >= self.max_trials:
            return f"max_trials {self.max_trials} reached"
        if self.max_gpu_hours is not None and self.gpu_hours >= self.max_gpu_hours:
            return f"gpu_hours {hours(self.gpu_hours)} >= budget {self.max_gpu_hours:g}"
        if self.wall_clock_s is not None and self.elapsed_s >= self.wall_clock_s:
            return f"wall clock {self.elapsed_s:.0f} s >= budget {self.wall_clock_s:g} s"
        if self.patience is not None and self.since_improvement >= self.patience:
            return f"no improvement in {self.since_improvement} trials (patience {self.patience})"
        return None

    def refusal(self, trial_id: str, asked: Reservation) -> str | None:
        """Why trial `trial_id` may not start on `asked` now (one line naming budget.gpu_hours
        and the fix), or None when it fits in what is left."""
        left = self.gpu_hours_left
        if left is None or asked.gpu_hours <= left * (1 + 1e-9):
            return None
        held = (f", {hours(self.reserved_gpu_hours)} held by running trials"
                if self.reserved_gpu_hours else "")
        return (f"budget.gpu_hours: trial {trial_id} would reserve {hours(asked.gpu_hours)} "
                f"GPU-hours ({asked.reckoning}) and {hours(left)} of {self.max_gpu_hours:g} are "
                f"left ({hours(self.gpu_hours)} used{held}); {asked.fix}")

    def to_dict(self) -> dict[str, Any]:
        left = lambda used, cap: None if cap is None else max(0.0, cap - used)  # noqa: E731
        return {
            "trials": self.trials, "max_trials": self.max_trials,
            "trials_left": self.trials_left,
            "gpu_hours": self.gpu_hours, "gpu_hours_reserved": self.reserved_gpu_hours,
            "gpu_hours_left": self.gpu_hours_left,
            "elapsed_s": self.elapsed_s,
            "wall_clock_left_s": left(self.elapsed_s, self.wall_clock_s),
            "since_improvement": self.since_improvement, "patience": self.patience,
            "exhausted": self.exhausted(),
        }
