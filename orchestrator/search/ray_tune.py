"""Ray Tune's searchers (Optuna TPE, HyperOpt) driven through their own suggest /
on_trial_complete interface, so the controller, not a Tune run loop, keeps scheduling.

Each knob becomes a categorical choice; a suggestion is mapped to the nearest valid candidate
not yet taken. A failed trial is reported with error=True, which both samplers record as a
failure and do not fit on.
"""

from __future__ import annotations

import itertools
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search.base import Searcher
from orchestrator.search.encoding import KnobSpace
from orchestrator.space import ParallelConfig

METRIC = "objective"  # the objective's gain, which both samplers maximise


class RayTuneSearcher(Searcher):
    def __init__(self, candidates: list[ParallelConfig], objective: Objective, *,
                 algorithm: str = "optuna", seed: int = 0):
        self.space = KnobSpace.of(candidates)
        self.objective = objective
        self._ids = itertools.count()
        self._taken: set[ParallelConfig] = set()
        self._asked: dict[ParallelConfig, str] = {}
        choices = {knob: list(range(len(values))) for knob, values in self.space.values.items()}
        if algorithm == "optuna":  # the sampler's own distributions: TPE by default
            import optuna
            from ray.tune.search.optuna import OptunaSearch

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            space = {k: optuna.distributions.CategoricalDistribution(v) for k, v in choices.items()}
            self.searcher = OptunaSearch(space, metric=METRIC, mode="max", seed=seed)
        elif algorithm == "hyperopt":
            from hyperopt import hp
            from ray.tune.search.hyperopt import HyperOptSearch

            space = {k: hp.choice(k, v) for k, v in choices.items()}
            self.searcher = HyperOptSearch(space, metric=METRIC, mode="max", random_state_seed=seed)
        else:
            raise ValueError(f"unknown Ray Tune searcher {algorithm!r}; use optuna or hyperopt")

    def _point(self, suggestion: dict[str, Any]) -> dict[str, Any]:
        return {knob: values[int(suggestion[knob])] for knob, values in self.space.values.items()}

    def ask(self, n: int = 1) -> list[ParallelConfig]:
        proposed = []
        for _ in range(n):
            trial_id = f"p{next(self._ids)}"
            suggestion = self.searcher.suggest(trial_id)
            if not isinstance(suggestion, dict):
                break
            config = self.space.nearest(self._point(suggestion), self._taken)
            if config is None:
                self.searcher.on_trial_complete(trial_id, error=True)
                break
            self._taken.add(config)
            self._asked[config] = trial_id
            proposed.append(config)
        return proposed

    def tell(self, config: ParallelConfig, result: TrialResult) -> None:
        self._taken.add(config)
        trial_id = self._asked.pop(config, None)
        value = self.objective.result_gain(result)
        if trial_id is None:
            # A result this searcher did not propose (replayed from a journal): feed it as an
            # evaluated point where the sampler allows it.
            self._teach(config, value)
            return
        if value is None:
            self.searcher.on_trial_complete(trial_id, error=True)
        else:
            self.searcher.on_trial_complete(trial_id, result={METRIC: value})

    def _teach(self, config: ParallelConfig, value: float | None) -> None:
        """Ray Tune's optional `add_evaluated_point` (Optuna has it); HyperOpt learns only from
        its own suggestions, so a replayed result only marks its config as taken there."""
        indices = {k: self.space.values[k].index(v) for k, v in self.space.point(config).items()}
        try:
            self.searcher.add_evaluated_point(indices, value, error=value is None)
        except NotImplementedError:
            pass
