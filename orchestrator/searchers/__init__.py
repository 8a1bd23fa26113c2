"""Searchers behind one ask/tell interface; `make_searcher` builds the one a spec names.

grid and random walk the candidate list; deephyper-cbo, optuna and hyperopt wrap those
libraries' Bayesian optimisers; cost-guided is ParaTune's own, led by the calibrated cost model.
"""

from __future__ import annotations

from orchestrator.search_spaces import ParallelConfig
from orchestrator.searchers.base import Searcher
from orchestrator.searchers.grid import GridSearcher
from orchestrator.searchers.random_search import RandomSearcher

ALGORITHMS = ("grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided")


def make_searcher(
    algorithm: str,
    candidates: list[ParallelConfig],
    seed: int = 0,
    *,
    cost_model=None,
    metric: str = "tokens_per_s",
    mode: str = "max",
    stop_margin: float = 0.0,
) -> Searcher:
    if algorithm == "grid":
        return GridSearcher(candidates)
    if algorithm == "random":
        return RandomSearcher(candidates, seed=seed)
    if algorithm == "deephyper-cbo":
        from orchestrator.searchers.deephyper_cbo import DeepHyperCBOSearcher

        return DeepHyperCBOSearcher(candidates, seed=seed, metric=metric, mode=mode)
    if algorithm in ("optuna", "hyperopt"):
        from orchestrator.searchers.ray_tune import RayTuneSearcher

        return RayTuneSearcher(candidates, algorithm=algorithm, seed=seed, metric=metric, mode=mode)
    if algorithm == "cost-guided":
        from orchestrator.searchers.cost_guided import CostGuidedSearcher

        if cost_model is None:
            raise ValueError("the cost-guided searcher needs a cost model")
        return CostGuidedSearcher(candidates, cost_model, metric=metric, seed=seed,
                                  stop_margin=stop_margin)
    raise ValueError(f"unknown search algorithm {algorithm!r}")  # the spec rejects it first


__all__ = ["ALGORITHMS", "GridSearcher", "RandomSearcher", "Searcher", "make_searcher"]
