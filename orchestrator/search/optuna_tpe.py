"""Optuna's TPE driven define-by-run, through Optuna's own ask-and-tell interface.

Knobs are suggested one after another, each from only the values that some candidate shares
with the choices made so far (`KnobSpace.shared`), so every suggestion is a valid layout.
Optuna holds one distribution per parameter name, so a knob whose values are narrowed by the
earlier choices is a parameter of its own, named by the values left (`pp|1/2`, as Optuna's
docs name a conditional parameter apart); trials left the same values pool what they learn
whatever led there, and a knob left one value is not suggested. Ray Tune's OptunaSearch is not
used: its `add_evaluated_point` cannot take a define-by-run space.

The sampler fits what it is told, so it is told what ran:
- a suggestion of an untaken layout is told that layout's result;
- one of a layout already taken is told that layout's result (now or when it comes), and the
  nearest untaken layout runs in its place, added to the study as a trial of its own;
- results it did not suggest (a resumed campaign's journal, another proposer's trials) are
  added with `study.add_trial` too. A failure is a failed trial, which TPE does not fit on.
"""

from __future__ import annotations

from typing import Any, Callable

from orchestrator.common.objective import Objective
from orchestrator.search.sampler_trials import SamplerTrials
from orchestrator.search.encoding import KnobSpace
from orchestrator.space import Layout

Choose = Callable[[str, list], Any]  # (parameter name, the values left) -> the value chosen


class OptunaTPESearcher(SamplerTrials):
    def __init__(self, candidates: list[Layout], objective: Objective, *, seed: int = 0):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        super().__init__(objective)
        self.space = KnobSpace.of(candidates)
        self.study = optuna.create_study(direction="maximize",
                                         sampler=optuna.samplers.TPESampler(seed=seed))

    @staticmethod
    def name(knob: str, left: list, values: list) -> str:
        return knob if left == values else f"{knob}|{'/'.join(map(str, left))}"

    def _walk(self, choose: Choose) -> dict[str, Any] | None:
        """A point chosen knob after knob among the values still valid; None if `choose`
        gives a value not among them."""
        point: dict[str, Any] = {}
        for knob, values in self.space.values.items():
            left = self.space.shared(knob, point)
            value = left[0] if len(left) == 1 else choose(self.name(knob, left, values), left)
            if value not in left:
                return None
            point[knob] = value
        return point

    def point_of(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The layout's knob values a trial's parameters stand for."""
        return self._walk(lambda name, left: params.get(name))

    def ask(self, n: int = 1) -> list[Layout]:
        proposed = []
        for _ in range(n):
            trial = self.study.ask()
            point = self._walk(trial.suggest_categorical)
            assert point is not None  # the sampler picks among the values offered
            twins = self.space.matching(point)
            config = next((c for c in twins if c not in self._taken), None)
            if config is None:  # a layout already taken: another runs in its place
                config = self.space.nearest(point, self._taken)
                self._settle_taken(trial, twins)
                if config is None:
                    break
            else:
                self._waiting.setdefault(config, []).append(trial)
            self._taken.add(config)
            proposed.append(config)
        return proposed

    def _complete(self, trial, value: float | None) -> None:
        from optuna.trial import TrialState

        if value is None:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    def _add(self, layout: Layout, value: float | None) -> None:
        """Add a layout the sampler did not suggest as a finished trial, with the parameters
        and distributions its own suggestion of that layout would have had."""
        import optuna
        from optuna.distributions import CategoricalDistribution

        target = self.space.point(layout)
        params: dict[str, Any] = {}
        distributions: dict[str, CategoricalDistribution] = {}

        def choose(name: str, left: list) -> Any:
            knob = name.partition("|")[0]
            params[name], distributions[name] = target[knob], CategoricalDistribution(left)
            return target[knob]

        if self._walk(choose) is None:
            return  # not a candidate of this space: nothing the sampler could suggest
        state = optuna.trial.TrialState.FAIL if value is None else optuna.trial.TrialState.COMPLETE
        self.study.add_trial(optuna.trial.create_trial(
            params=params, distributions=distributions, value=value, state=state))
