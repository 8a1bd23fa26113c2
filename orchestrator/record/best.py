"""The campaign's best, by one rule everywhere: the status line, `paratune best`, the report
and its convergence curve, patience, the scaling study and the service all ask here.

The best is chosen among full measurements of the tuned scale (search, confirm, repeat) once
one succeeded, else among screens; a slice campaign's best is the best measured at its target
once one was, else its slice's; a layout measured more than once counts at the mean of its
measurements. Which of two values is better is the objective's to say. Ties go to the layout
measured first (by trial ID), so the answer does not depend on the order records are read in.
"""

from __future__ import annotations

import math

from orchestrator.common.objective import Objective
from orchestrator.record.journal import CONFIRM, REPEAT, SCREEN, SEARCH, TARGET, TrialRecord
from orchestrator.space import Layout

FULL_PHASES = (SEARCH, CONFIRM, REPEAT)
TIE = 1e-9  # distances to a mean that differ by less than this share of it are equal


class Standings:
    """Every layout's successful full measurements and every successful screen, grouped as
    trials end, so that the best can be asked again after each one."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.layouts: dict[Layout, list[TrialRecord]] = {}  # successful full ones
        self.screens: list[TrialRecord] = []  # successful screens
        self.at_target: set[Layout] = set()  # a slice campaign's, measured at its target

    def add(self, record: TrialRecord) -> None:
        """Count a trial that ended; failures, other scales and unfinished trials count not."""
        if self.objective.value(record.result) is None:
            return
        if record.phase in FULL_PHASES or record.phase == TARGET:
            self.layouts.setdefault(record.config, []).append(record)
            if record.phase == TARGET:
                self.at_target.add(record.config)
        elif record.phase == SCREEN:
            self.screens.append(record)

    def mean(self, layout: Layout) -> float:
        """A layout's value: the mean of its full measurements, summed exactly so that it
        does not depend on the order they were added in."""
        values = [self.objective.value(r.result) for r in self.layouts[layout]]
        return math.fsum(values) / len(values)

    def best(self) -> TrialRecord | None:
        """The best layout's measurement closest to its mean, or the best screen while no full
        measurement succeeded."""
        if not self.layouts:
            screens = sorted(self.screens, key=lambda r: r.trial_id)
            return self.objective.best(screens, lambda r: self.objective.value(r.result))
        pool = self.at_target or self.layouts
        first_measured = sorted(pool, key=lambda c: min(r.trial_id for r in self.layouts[c]))
        return self.nearest_mean(self.objective.best(first_measured, self.mean))

    def nearest_mean(self, layout: Layout) -> TrialRecord:
        """The layout's measurement closest to its mean; of two as close (two measurements
        always are, but for rounding) the first by trial ID."""
        mean = self.mean(layout)
        distances = [(abs(self.objective.value(r.result) - mean), r) for r in self.layouts[layout]]
        nearest = min(d for d, _ in distances) + TIE * abs(mean)
        return min((r for d, r in distances if d <= nearest), key=lambda r: r.trial_id)

    def score(self, record: TrialRecord) -> float | None:
        """What `record` (a best) is compared by: its layout's mean, a screen's own value."""
        if record.phase == SCREEN:
            return self.objective.value(record.result)
        return self.mean(record.config)


def best_record(records: list[TrialRecord], objective: Objective) -> TrialRecord | None:
    """The best of `records` by the campaign's rule (see the module's docstring)."""
    standings = Standings(objective)
    for record in records:
        standings.add(record)
    return standings.best()


def finish_order(records: list[TrialRecord]) -> list[TrialRecord]:
    """Ended trials in the order they ended (the order a live campaign saw them); trials of
    journals that did not record when they ended come last, by trial ID."""
    ended = [r for r in records if r.result is not None]
    return sorted(ended, key=lambda r: (r.finished_at if r.finished_at is not None
                                        else float("inf"), r.trial_id))


class BestSoFar:
    """The best as trials end, one at a time; `add` says whether the best improved (what
    patience counts): a first success, a first full measurement after screens, or a best whose
    score (its layout's mean) beats the previous best's. A repeat that lowers the best's mean
    is no improvement; a layout that then takes the lead is one if it beats the lowered mean."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.standings = Standings(objective)
        self.record: TrialRecord | None = None
        self.score: float | None = None

    @property
    def value(self) -> float | None:
        """The best measurement's own value (what `paratune best` shows)."""
        return self.objective.value(self.record.result) if self.record else None

    @property
    def screened_only(self) -> bool:
        """Whether the best is still a screen (no full measurement has succeeded yet)."""
        return self.record is not None and self.record.phase == SCREEN

    def add(self, record: TrialRecord) -> bool:
        self.standings.add(record)
        previous, previous_score = self.record, self.score
        self.record = self.standings.best()
        self.score = self.standings.score(self.record) if self.record else None
        if self.record is None:
            return False
        if previous is None or (previous.phase == SCREEN and self.record.phase != SCREEN):
            return True
        return self.objective.better(self.score, previous_score)
