"""The campaign's best, by one rule everywhere: the status line, `paratune best`, the report
and its convergence curve, patience, the scaling study and the service all ask here.

The best is chosen among full measurements of the tuned scale (search, confirm, repeat) once
one succeeded, else among screens; a layout measured more than once counts at the mean of its
measurements. Which of two values is better is the objective's to say.
"""

from __future__ import annotations

from orchestrator.common.objective import Objective
from orchestrator.record.journal import CONFIRM, REPEAT, SCREEN, SEARCH, TrialRecord
from orchestrator.space import ParallelConfig


def comparable(records: list[TrialRecord]) -> list[TrialRecord]:
    """The records the best is chosen from: full measurements of the tuned scale (search,
    confirm or repeat) when any succeeded, else screens; never the scaling study's other
    scales."""
    full = [r for r in records if r.phase in (SEARCH, CONFIRM, REPEAT) and r.result is not None
            and r.result.ok]
    return full if full else [r for r in records if r.phase == SCREEN]


def best_record(records: list[TrialRecord], objective: Objective) -> TrialRecord | None:
    """The best layout by the mean of its full measurements (a layout measured again counts
    once, at its mean), as the record of it whose value is closest to that mean."""
    chosen = comparable(records)
    groups: dict[ParallelConfig, list[TrialRecord]] = {}
    for record in chosen:
        if record.phase != SCREEN and objective.value(record.result) is not None:
            groups.setdefault(record.config, []).append(record)
    if not groups:
        return objective.best(chosen, lambda r: objective.value(r.result))
    means = {c: sum(objective.value(r.result) for r in rs) / len(rs) for c, rs in groups.items()}
    config = objective.best(means, lambda c: means[c])
    return min(groups[config], key=lambda r: abs(objective.value(r.result) - means[config]))


def finish_order(records: list[TrialRecord]) -> list[TrialRecord]:
    """Ended trials in the order they ended (the order a live campaign saw them)."""
    ended = [r for r in records if r.result is not None]
    return sorted(ended, key=lambda r: (r.finished_at if r.finished_at is not None
                                        else float("inf"), r.trial_id))


class BestSoFar:
    """The best as trials end, one at a time; `add` says whether the best improved."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.ended: list[TrialRecord] = []
        self.record: TrialRecord | None = None

    @property
    def value(self) -> float | None:
        return self.objective.value(self.record.result) if self.record else None

    @property
    def screened_only(self) -> bool:
        """Whether the best is still a screen (no full measurement has succeeded yet)."""
        return self.record is not None and self.record.phase == SCREEN

    def add(self, record: TrialRecord) -> bool:
        self.ended.append(record)
        previous, self.record = self.record, best_record(self.ended, self.objective)
        if self.record is None or self.record is previous:
            return False
        if previous is None or (previous.phase == SCREEN) != (self.record.phase == SCREEN):
            return self.record.phase != SCREEN or previous is None  # a first full measurement
        return self.objective.better(self.value, self.objective.value(previous.result))


def best_values_so_far(records: list[TrialRecord], objective: Objective) -> list[float | None]:
    """The best's value after each of `records` (in the order given) has ended."""
    best = BestSoFar(objective)
    values = []
    for record in records:
        best.add(record)
        values.append(best.value)
    return values
