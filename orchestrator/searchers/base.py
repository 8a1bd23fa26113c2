"""The searcher interface: `ask(n)` proposes configs, `tell(config, result)` reports one back.

Searchers never run anything (backends do) and keep no storage of their own: on resume the
controller replays the journal through `tell`, the way Optuna's storage backs its samplers.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig


class Searcher(Protocol):
    def ask(self, n: int = 1) -> list[ParallelConfig]:
        """Up to n configs not proposed before; fewer (or none) when the space is exhausted."""
        ...

    def tell(self, config: ParallelConfig, result: TrialResult) -> None:
        """Record the outcome of a config (which may be a failure)."""
        ...


class CandidateListSearcher:
    """Walks a fixed order of candidates, skipping any config already asked or told."""

    def __init__(self, order: list[ParallelConfig]):
        self._order = order
        self._next = 0
        self._seen: set[ParallelConfig] = set()
        self.history: list[tuple[ParallelConfig, TrialResult]] = []

    def ask(self, n: int = 1) -> list[ParallelConfig]:
        proposed: list[ParallelConfig] = []
        while len(proposed) < n and self._next < len(self._order):
            config = self._order[self._next]
            self._next += 1
            if config not in self._seen:
                self._seen.add(config)
                proposed.append(config)
        return proposed

    def tell(self, config: ParallelConfig, result: TrialResult) -> None:
        self._seen.add(config)
        self.history.append((config, result))
