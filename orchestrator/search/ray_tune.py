"""HyperOpt's TPE through Ray Tune's HyperOptSearch, driven by its own suggest /
on_trial_complete interface, so the controller, not a Tune run loop, keeps scheduling.
(Optuna is driven directly, define-by-run: optuna_tpe.py.)

Each knob is a categorical choice of its own, so a suggestion may be no valid layout; it is
mapped to the nearest valid candidate not yet taken. HyperOpt can express conditional choices
only as a fixed tree of nested `hp.choice`, whose labels must each belong to one node: a space
of valid layouts alone is the candidates' trie, a label for every distinct subtree, each
learning only from the trials that pass through it, and an evaluated point added to its
`Trials` must then list every label, active or not. So the space stays flat, and the sampler
is told what ran:
- a suggestion that is a valid untaken layout is completed with that layout's result;
- one that is no valid layout is completed at once with a gain of 0, below any measured gain
  (TPE ranks its trials, so the region sinks), and the layout run in its place is added as an
  evaluated point of its own when its result comes;
- one of a layout already taken is completed with that layout's result (now or when it comes).
Results the sampler did not suggest (a resumed campaign's journal, another proposer's trials)
are added as evaluated points too, as done documents in its `Trials`. A failed trial is
reported as an error, which the sampler records as a failure and does not fit on.
"""

from __future__ import annotations

import itertools
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.search.sampler_trials import SamplerTrials
from orchestrator.search.encoding import KnobSpace
from orchestrator.space import Layout

METRIC = "objective"  # the objective's gain, which the sampler maximises
INFEASIBLE = 0.0  # the gain told for a suggestion that is no valid layout: gains are positive


class RayTuneSearcher(SamplerTrials):
    def __init__(self, candidates: list[Layout], objective: Objective, *,
                 algorithm: str = "hyperopt", seed: int = 0):
        super().__init__(objective)
        self.space = KnobSpace.of(candidates)
        self._ids = itertools.count()
        self.algorithm = algorithm
        if algorithm != "hyperopt":
            raise ValueError(f"unknown Ray Tune searcher {algorithm!r}; use hyperopt")
        from hyperopt import hp
        from ray.tune.search.hyperopt import HyperOptSearch

        space = {k: hp.choice(k, list(range(len(v)))) for k, v in self.space.values.items()}
        self.searcher = HyperOptSearch(space, metric=METRIC, mode="max", random_state_seed=seed)

    def _point(self, suggestion: dict[str, Any]) -> dict[str, Any]:
        return {knob: values[int(suggestion[knob])] for knob, values in self.space.values.items()}

    def ask(self, n: int = 1) -> list[Layout]:
        proposed = []
        for _ in range(n):
            trial_id = f"p{next(self._ids)}"
            suggestion = self.searcher.suggest(trial_id)
            if not isinstance(suggestion, dict):
                break
            point = self._point(suggestion)
            config = self.space.nearest(point, self._taken)
            if config is None:
                self.searcher.on_trial_complete(trial_id, error=True)
                break
            self._taken.add(config)
            self._settle(trial_id, point, config)
            proposed.append(config)
        return proposed

    def _settle(self, trial_id: str, point: dict[str, Any], layout: Layout) -> None:
        """Tie the sampler's trial to the layout it suggested, so it is completed with that
        layout's result and never with the result of the layout run in its place."""
        if self.space.key(point) == self.space.key(self.space.point(layout)):
            self._waiting.setdefault(layout, []).append(trial_id)
            return
        twins = self.space.matching(point)  # all taken, or `nearest` would have chosen one
        if not twins:
            self._complete(trial_id, INFEASIBLE)
            return
        self._settle_taken(trial_id, twins)

    def _complete(self, trial_id: str, value: float | None) -> None:
        if value is None:
            self.searcher.on_trial_complete(trial_id, error=True)
        else:
            self.searcher.on_trial_complete(trial_id, result={METRIC: value})

    def _add(self, layout: Layout, value: float | None) -> None:
        """Add the layout as an evaluated point. Ray's HyperOptSearch has no
        `add_evaluated_point`, so the point goes into its hyperopt `Trials` as a finished
        document, as hyperopt's own `generate_trial` lays one out."""
        import hyperopt
        from hyperopt.fmin import generate_trial

        indices = {k: self.space.values[k].index(v) for k, v in self.space.point(layout).items()}
        trials = self.searcher.get_state()["hyperopt_trials"]
        (tid,) = trials.new_trial_ids(1)
        doc = generate_trial(tid, indices)
        if value is None:
            doc["state"], doc["result"] = hyperopt.JOB_STATE_ERROR, {"status": hyperopt.STATUS_FAIL}
        else:  # the sampler minimises a loss: the gain negated, as Ray Tune reports it
            doc["state"] = hyperopt.JOB_STATE_DONE
            doc["result"] = {"status": hyperopt.STATUS_OK, "loss": -value}
        trials.insert_trial_docs([doc])
        trials.refresh()
