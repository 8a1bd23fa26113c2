"""Proposal sources: where the scheduling loop's next trial comes from.

The loop keeps one queue and fills free slots from its sources in order: the searcher's
repeats of close contenders and its proposals (this file), successive-halving promotions (halving.py) and the scaling study
(scaling.py). A source answers None when it has nothing now; the campaign ends when nothing
runs and no source has anything. Budgeted sources stop once the budget is spent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

from orchestrator.record.journal import REPEAT, SCREEN, TrialRecord
from orchestrator.search import Searcher
from orchestrator.space import Layout


@dataclass(frozen=True)
class Proposal:
    config: Layout
    phase: str
    # Check the (calibrated) memory model first and record it as infeasible if it cannot fit.
    prune: bool = True


class LoopState(Protocol):
    """What a source may read of the loop."""

    records: dict[str, TrialRecord]  # every trial so far, by id
    stop_reason: str | None  # why budgeted sources have stopped, once they have

    @property
    def busy(self) -> int:
        """Trials running or about to be submitted."""
        ...

    def is_new(self, layout: Layout, phase: str) -> bool:
        """No trial of this config in this phase exists yet."""
        ...

    @property
    def trials_left(self) -> int:
        """Trials `budget.max_trials` still allows, those about to be submitted counted."""
        ...


class ProposalSource(ABC):
    budgeted = True  # counts against the campaign's budget, and stops when it is spent
    held_back: str | None = None  # why it proposes nothing though the budget is not spent

    @abstractmethod
    def propose(self, state: LoopState) -> Proposal | None:
        """The next trial to run, or None for now (a later call may have one)."""

    def outcome(self, records: list[TrialRecord]) -> str | None:
        """What it did, to follow the reason the campaign ended (None: nothing to say)."""
        return None


class SearchProposals(ProposalSource):
    """The searcher's proposals, in `phase` (search, or screen under successive halving)."""

    def __init__(self, searcher: Searcher, phase: str):
        self.searcher = searcher
        self.phase = phase
        self.exhausted = False  # the searcher has nothing more to propose

    def propose(self, state: LoopState) -> Proposal | None:
        if self.phase == SCREEN and state.trials_left < self._screens_running(state) + 2:
            # A screen is worth its trial only if one is left to confirm it, and one for each
            # screen still running: the last trials go to confirming what was screened.
            self.held_back = (f"{state.trials_left} trial(s) left, kept to confirm the screens; "
                              "a new screen could not be confirmed")
            return None
        self.held_back = None
        while True:
            asked = self.searcher.ask(1)
            if not asked:
                self.exhausted = True
                self.held_back = self.searcher.stop_reason  # the campaign's end says why
                return None
            if state.is_new(asked[0], self.phase):
                return Proposal(asked[0], self.phase)

    @staticmethod
    def _screens_running(state: LoopState) -> int:
        return sum(1 for r in state.records.values() if r.phase == SCREEN and r.result is None)


class RepeatProposals(ProposalSource):
    """A layout measured before, measured again because the campaign's measured noise does not
    yet tell it apart from the best (the searcher's `repeat`): a trial of its own, in phase
    `repeat`, told back to the searcher. It already ran, so the memory model is not asked
    again. A searcher that finds the measurements noiseless asks for none, and the budget goes
    to the search."""

    def __init__(self, searcher: Searcher):
        self.searcher = searcher

    def propose(self, state: LoopState) -> Proposal | None:
        config = self.searcher.repeat(trials_left=state.trials_left)
        return None if config is None else Proposal(config, REPEAT, prune=False)
