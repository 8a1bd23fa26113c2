"""Searchers behind one ask/tell interface (base.py); `make_searcher` builds the one a spec names.

grid and random walk the candidate list; deephyper-cbo, optuna and hyperopt wrap those
libraries' Bayesian optimisers (optuna driven directly, hyperopt through Ray Tune); cost-guided
is ParaTune's own, led by the calibrated cost model.
"""

from __future__ import annotations

from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel
from orchestrator.search.base import Searcher
from orchestrator.search.grid import GridSearcher
from orchestrator.search.random_search import RandomSearcher
from orchestrator.search.repeats import MAX_REPEATS
from orchestrator.space import Layout

ALGORITHMS = ("grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided")


def make_searcher(
    algorithm: str,
    candidates: list[Layout],
    objective: Objective,
    *,
    seed: int = 0,
    cost_model: CostModel | None = None,
    stop_margin: float = 0.0,
    max_repeats: int = MAX_REPEATS,
) -> Searcher:
    if algorithm == "grid":
        return GridSearcher(candidates)
    if algorithm == "random":
        return RandomSearcher(candidates, seed=seed)
    if algorithm == "deephyper-cbo":  # heavy imports: loaded only when chosen
        from orchestrator.search.deephyper_cbo import DeepHyperCBOSearcher

        return DeepHyperCBOSearcher(candidates, objective, seed=seed)
    if algorithm == "optuna":
        from orchestrator.search.optuna_tpe import OptunaTPESearcher

        return OptunaTPESearcher(candidates, objective, seed=seed)
    if algorithm == "hyperopt":
        from orchestrator.search.ray_tune import RayTuneSearcher

        return RayTuneSearcher(candidates, objective, algorithm=algorithm, seed=seed)
    if algorithm == "cost-guided":
        from orchestrator.search.cost_guided import CostGuidedSearcher

        if cost_model is None:
            raise ValueError("the cost-guided searcher needs a cost model")
        return CostGuidedSearcher(candidates, cost_model, objective, seed=seed,
                                  stop_margin=stop_margin, max_repeats=max_repeats)
    raise ValueError(f"unknown search algorithm {algorithm!r}")  # the spec rejects it first


__all__ = ["ALGORITHMS", "GridSearcher", "RandomSearcher", "Searcher", "make_searcher"]
