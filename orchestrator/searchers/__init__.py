"""Searchers behind one ask/tell interface; `make_searcher` picks one from the spec."""

from __future__ import annotations

from orchestrator.search_spaces import ParallelConfig
from orchestrator.searchers.base import Searcher
from orchestrator.searchers.grid import GridSearcher
from orchestrator.searchers.random_search import RandomSearcher


def make_searcher(algorithm: str, candidates: list[ParallelConfig], seed: int = 0) -> Searcher:
    if algorithm == "grid":
        return GridSearcher(candidates)
    if algorithm == "random":
        return RandomSearcher(candidates, seed=seed)
    raise ValueError(f"unknown search algorithm {algorithm!r}")  # the spec rejects it first


__all__ = ["GridSearcher", "RandomSearcher", "Searcher", "make_searcher"]
