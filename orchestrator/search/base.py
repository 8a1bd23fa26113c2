"""The searcher interface, shaped like Optuna's ask/tell and Ray Tune's `Searcher`.

`ask(n)` proposes configs and `tell(config, result)` reports one back; `repeat`, `running`
and `add_prior` are optional, with defaults on the base (no repeats, nothing to note, priors
ignored), so the controller calls them on any searcher.
Searchers never run anything (backends do) and keep no storage of their own: on resume the
controller replays the journal through `tell`, the way Optuna's storage backs its samplers.
Every searcher is given the campaign's `Objective` and honours its mode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from orchestrator.result import TrialResult
from orchestrator.space import Layout


class Searcher(ABC):
    # Why `ask` returns nothing, once a searcher that stops itself does (one line); None for
    # a space it has exhausted, which needs no words.
    stop_reason: str | None = None

    @abstractmethod
    def ask(self, n: int = 1) -> list[Layout]:
        """Up to n configs not proposed before; fewer (or none) when the space is exhausted."""

    @abstractmethod
    def tell(self, layout: Layout, result: TrialResult) -> None:
        """Record the outcome of a config (which may be a failure), whoever proposed it."""

    def repeat(self, trials_left: int | None = None) -> Layout | None:
        """A config measured before that should be measured again before a winner is named
        (a close contender, within the measured noise), or None. Asked before `ask`;
        the repeat is a trial of its own, told back through `tell` like any other.
        `trials_left` is what the campaign's trial budget still allows (None: unbounded), so
        the last trials can go to naming the winner. Searchers that do not model measurement
        noise never ask for one."""
        return None

    def running(self, layout: Layout, repeat: bool = False) -> None:
        """On resume: a trial of `config` this searcher proposed is still running (or is run
        again), a repeat if `repeat`; count it as asked, as before the controller died.
        Searchers that keep no record of what they asked need nothing."""

    def add_prior(self, residuals: list[tuple[Layout, float]]) -> None:
        """Residuals log(measured / predicted gain) seen in another campaign (warm start).
        Searchers that do not model the cost model's error ignore them."""


class CandidateListSearcher(Searcher):
    """Walks a fixed order of candidates, skipping any config already asked or told."""

    def __init__(self, order: list[Layout]):
        self._order = order
        self._next = 0
        self._seen: set[Layout] = set()
        self.history: list[tuple[Layout, TrialResult]] = []

    def running(self, layout: Layout, repeat: bool = False) -> None:
        self._seen.add(layout)

    def ask(self, n: int = 1) -> list[Layout]:
        proposed: list[Layout] = []
        while len(proposed) < n and self._next < len(self._order):
            config = self._order[self._next]
            self._next += 1
            if config not in self._seen:
                self._seen.add(config)
                proposed.append(config)
        return proposed

    def tell(self, layout: Layout, result: TrialResult) -> None:
        self._seen.add(layout)
        self.history.append((layout, result))
