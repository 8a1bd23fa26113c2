"""DeepHyper's centralized Bayesian optimisation (CBO) behind ask/tell.

The problem has one hyperparameter per knob that varies in the space, with conditions where a
knob only matters given another (the pipeline schedule when pp > 1, virtual stages with the
interleaved schedule, sequence parallelism when tp > 1), and a forbidden clause for each
combination of values of up to three knobs that no candidate has (`KnobSpace.forbidden`: tp 4
with pp 2 in a world of 4; tp, pp and a micro-batch the global batch cannot take), which CBO's
sampling honours, so it suggests valid layouts up front wherever no rule spans more knobs.
HpProblem's `set_constraint_fn` would express the whole rule, but DeepHyper 0.13.2 fails with
it once the problem has conditions or forbidden clauses (its sampler expects a table where it
gets a list). CBO maximises the objective's gain (the metric, or its reciprocal for
`mode: min`). Failures go back as DeepHyper failure values ("F_oom", "F_failed", ...), never as
made-up numbers. `fast=True` uses the sampling acquisition optimiser on 1,000 points, which
brings `ask` from ~10 s to ~0.4 s here.

CBO fits what it is told, so it is told what ran: a suggestion that is still no valid layout is
mapped to the nearest valid candidate, told back at once as "F_infeasible" (CBO replaces a
failure with the worst value seen, so it learns the region is invalid), and the layout that
ran is told under its own point when its result comes. A suggestion of a layout already taken
is told nothing more: CBO already has (or will have) that point.
"""

from __future__ import annotations

import tempfile
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search.base import Searcher
from orchestrator.search.encoding import CONDITIONS, KnobSpace
from orchestrator.space import Layout


class DeepHyperCBOSearcher(Searcher):
    def __init__(self, candidates: list[Layout], objective: Objective, *, seed: int = 0,
                 fast: bool = True, n_initial_points: int | None = None, forbid: bool = True):
        self.space = KnobSpace.of(candidates)
        self.objective = objective
        self._taken: set[Layout] = set()
        self._asked: dict[Layout, dict[str, Any]] = {}
        self._log_dir = tempfile.TemporaryDirectory(prefix="paratune-cbo-")
        self.problem = self._problem(seed, forbid)
        # Layouts pruned as infeasible come back as failures too: no quota on failures.
        acq_kwargs: dict[str, Any] = {"max_total_failures": -1}
        kwargs: dict[str, Any] = {}
        if fast:
            kwargs["acq_optimizer"] = "sampling"
            acq_kwargs["n_points"] = 1000
        kwargs["acq_optimizer_kwargs"] = acq_kwargs
        if n_initial_points is not None:
            kwargs["n_initial_points"] = n_initial_points
        from deephyper.hpo import CBO

        self.cbo = CBO(self.problem, random_state=seed, log_dir=self._log_dir.name,
                       checkpoint_history_to_csv=False, **kwargs)

    def _problem(self, seed: int, forbid: bool):
        import ConfigSpace as cs
        from deephyper.hpo import HpProblem

        problem = HpProblem(seed=seed)
        default = self.space.points()[0]  # a valid layout: ConfigSpace rejects a forbidden one
        hp = {}
        for knob, values in self.space.values.items():
            hp[knob] = problem.add_hyperparameter([_text(v) for v in values], knob,
                                                  default_value=_text(default[knob]))
        for child, (parent, matters) in CONDITIONS.items():
            if child in hp and parent in hp:
                values = self.space.values[parent]
                active = [_text(v) for v in values if matters(v)]
                if active and len(active) < len(values):
                    problem.add_condition(cs.InCondition(hp[child], hp[parent], active))
        for combination in self.space.forbidden() if forbid else ():
            problem.add_forbidden_clause(cs.ForbiddenAndConjunction(
                *(cs.ForbiddenEqualsClause(hp[k], _text(v)) for k, v in combination)))
        return problem

    def _to_point(self, suggestion: dict[str, Any]) -> dict[str, Any]:
        point = {}
        for knob, values in self.space.values.items():
            text = suggestion.get(knob)
            matches = [v for v in values if _text(v) == text]
            point[knob] = matches[0] if matches else values[0]  # inactive: first value
        return point

    def ask(self, n: int = 1) -> list[Layout]:
        proposed, infeasible = [], []
        for suggestion in self.cbo.ask(n):
            point = self._to_point(suggestion)
            config = self.space.nearest(point, self._taken)
            if config is None:
                break
            self._taken.add(config)
            proposed.append(config)
            if self.space.key(point) == self.space.key(self.space.point(config)):
                self._asked[config] = suggestion
            elif not self.space.matching(point):
                infeasible.append((suggestion, "F_infeasible"))
        if infeasible:
            self.cbo.tell(infeasible)
        return proposed

    def running(self, layout: Layout, repeat: bool = False) -> None:
        self._taken.add(layout)

    def tell(self, layout: Layout, result: TrialResult) -> None:
        self._taken.add(layout)
        suggestion = self._asked.pop(layout, None)
        if suggestion is None:  # replayed, asked in place of another suggestion, or not ours
            suggestion = {k: _text(v) for k, v in self.space.point(layout).items()}
        value = self.objective.result_gain(result)
        self.cbo.tell([(suggestion, value if value is not None else f"F_{result.status}")])


def _text(value: Any) -> str:
    return str(value)
