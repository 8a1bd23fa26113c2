"""Bookkeeping shared by the peers driven through ask-and-tell (Optuna, Ray Tune's HyperOpt):
which layouts are taken, which sampler trials wait for a layout's result, and the results so
far, so each trial is told what ran, and a layout the sampler did not suggest (a replay, one
run in place of another suggestion) is added as an evaluated point."""

from __future__ import annotations

from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search.base import Searcher
from orchestrator.space import Layout


class SamplerTrials(Searcher):
    """A searcher whose sampler's trials stand for layouts. Subclasses say how a trial is
    completed (`_complete`) and how a layout the sampler did not suggest is added (`_add`)."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self._taken: set[Layout] = set()
        # Trials that suggested a layout, waiting for its result; the gains (None: failed) of
        # the layouts told so far.
        self._waiting: dict[Layout, list[Any]] = {}
        self._gains: dict[Layout, float | None] = {}

    def _complete(self, trial: Any, value: float | None) -> None:
        raise NotImplementedError

    def _add(self, layout: Layout, value: float | None) -> None:
        raise NotImplementedError

    def _settle_taken(self, trial: Any, twins: list[Layout]) -> None:
        """Tell a trial that suggested a layout already taken that layout's result, now or
        when it comes."""
        known = [twin for twin in twins if twin in self._gains]
        if known:
            self._complete(trial, self._gains[known[0]])
        else:
            self._waiting.setdefault(twins[0], []).append(trial)

    def running(self, layout: Layout, repeat: bool = False) -> None:
        self._taken.add(layout)

    def tell(self, layout: Layout, result: TrialResult) -> None:
        self._taken.add(layout)
        value = self.objective.result_gain(result)
        self._gains[layout] = value
        waiting = self._waiting.pop(layout, [])
        for trial in waiting:
            self._complete(trial, value)
        if not waiting:  # replayed, run in place of another suggestion, or not ours
            self._add(layout, value)
