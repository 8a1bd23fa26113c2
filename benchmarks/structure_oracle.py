"""A reference for the search benchmark, not a searcher a campaign could use: a search told how
a `-parallel-quirks` landscape was drawn.

Those landscapes' truth is the cost model times the expert, context and interleaving quirks of
orchestrator/backends/parallel_quirks.py, whose few hidden parameters (a span, a rate per
exchange, ...) are drawn once per seed, and each measurement carries log-normal noise of a
known spread. This search holds exactly that: a posterior over the hidden parameters, as
weighted draws from their prior (`HiddenParameters.prior`), reweighted by each measurement's
likelihood. It proposes by Thompson sampling: a draw picked by its weight names the untried
layout it predicts best. What it needs to reach within 3% of the best is the number of trials
the landscape's information allows a search that knows its structure: the oracle figure the
cost-guided searcher is held to (within 1.5x of it).
"""

from __future__ import annotations

import math
import random

import numpy as np

from orchestrator.backends.parallel_quirks import HiddenParameters, log_factor
from orchestrator.result import TrialResult
from orchestrator.search.base import Searcher

NAME = "structure-oracle"
DRAWS = 4000


class StructureOracle(Searcher):
    def __init__(self, candidates, cost_model, objective, *, seed: int, noise: float,
                 strength: float = 1.0, draws: int = DRAWS):
        self.candidates = list(candidates)
        self.objective = objective
        self._rng = random.Random(seed)
        self._index = {config: i for i, config in enumerate(self.candidates)}
        prior = HiddenParameters.prior(draws, seed=seed)
        model = np.array([math.log(objective.predicted(cost_model.estimate(c)))
                          for c in self.candidates])
        quirks = np.stack([np.broadcast_to(log_factor(prior, c.to_params(), strength), (draws,))
                           for c in self.candidates], axis=1)
        self._predicted = model[None, :] + quirks  # log objective, per draw and candidate
        self._log_weight = np.zeros(draws)
        self._sigma = max(noise, 0.01)  # a noiseless landscape: the draws stay distinguishable
        self._taken: set[int] = set()

    def ask(self, n: int = 1) -> list:
        proposed = []
        weights = np.exp(self._log_weight - self._log_weight.max())
        cumulative = np.cumsum(weights / weights.sum())
        while len(proposed) < n and len(self._taken) < len(self.candidates):
            draw = min(int(np.searchsorted(cumulative, self._rng.random())), len(cumulative) - 1)
            row = self._predicted[draw].copy()
            row[list(self._taken)] = -np.inf
            pick = int(np.argmax(row))
            self._taken.add(pick)
            proposed.append(self.candidates[pick])
        return proposed

    def tell(self, config, result: TrialResult) -> None:
        i = self._index.get(config)
        if i is None:
            return
        self._taken.add(i)
        value = self.objective.value(result)
        if value is None or value <= 0:
            return  # a failure says nothing of the hidden parameters
        residual = math.log(value) - self._predicted[:, i]
        self._log_weight -= residual**2 / (2 * self._sigma**2)
