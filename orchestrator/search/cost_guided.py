"""ParaTune's own searcher: measure what the calibrated cost model says is best, and learn
where the model is wrong.

- Every candidate is scored by the cost model, recalibrated on each result (calibration.py).
- A surrogate models the residual log(measured/predicted) with one effect per knob value and
  one per pair of knob values (residuals.py: Bayesian regression in its kernel form), so
  effects the analytic model misses (a slow kernel at tp=8, a collective off its fast path for
  one tp and group layout) are learned from few trials and carry over to untried combinations;
  its posterior std is the uncertainty, interactions included.
- The next config is the one with the highest upper bound, predicted · exp(residual + κ·σ);
  the first picks also spread over the main knobs (tp, pp, sharding) so the calibration sees
  different regimes. Then the calibrated model's VERIFY_TOP favourites (residuals aside) are
  measured: a quirk that hits the favourite makes the residual model blame knob values it
  shares with the runner-up, whose bound then falls with it, and only a measurement of the
  runner-up says whether it shares the loss. κ grows with the trials measured, as in GP-UCB
  (Srinivas et al., 2010): small for the first EARLY_TRIALS (KAPPA_EARLY), when the posterior
  mean under a prior of the residual's own form is most of what tells a good layout and a
  large κ spends trials on layouts whose only merit is how little is known of them; then
  KAPPA, so a knob value the first trials left untried still gets measured. Both values were
  chosen on the search benchmark (docs/benchmarks.md: a fit, with held-out seeds).
- Memory (memory_belief.py): a candidate's gain and bound are weighed by its chance to run,
  1 where the calibrated memory model says it fits, falling across the `risky` band
  (fit_verdict.py), so a layout just over the predicted limit is tried when its discounted
  gain leads, and one near the margin's edge only when it would win by far. An out-of-memory
  run rules out every layout predicted to need as much or more; measured peaks that show the
  model over-predicting bring the layouts near the limit in.
- It stops (ask returns nothing) once no unmeasured candidate's upper bound, with the
  interaction uncertainty in σ, reaches the best expected value of a measured one less
  `stop_margin`, and no tp x pp x cp x ep family the model's measured error says could still
  win is left unmeasured (families.py); `stop_reason` then says so in one line.
- Before a winner is named, contenders not yet told apart from the leader at the measured
  noise are measured again (`repeat`, rules in repeats.py), the closest rival first: once the
  search is over, or when the trial budget is about to end it; only while a repeat costs
  fewer GPU-hours than the regret it can avoid, up to `search.max_repeats` measurements of a
  layout. While it searches, a trial goes to an untried layout, not to a repeat: a repeat
  only names the winner, it finds none.
  The noise is estimated from those repeats; on a landscape they show to be noiseless, no
  layout is measured a third time and the trials go to untried layouts.

Everything is computed on the objective's gain (the metric, or its reciprocal under
`mode: min`), so "higher is better" holds inside and the mode is honoured.
"""

from __future__ import annotations

import math

import numpy as np

from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel, calibrate
from orchestrator.costmodel.calibration import FEATURES, feature_model, features
from orchestrator.costmodel.fit_verdict import memory_margin
from orchestrator.result import TrialResult
from orchestrator.search.base import Searcher
from orchestrator.search.encoding import KnobSpace, knob_values
from orchestrator.search.families import family_left_to_measure, regime
from orchestrator.search.memory_belief import MemoryBelief
from orchestrator.search.repeats import MAX_REPEATS, Noise, Standing, estimate_noise, repeat_price
from orchestrator.search.residuals import NOISE_FLOOR, KnobCodes, ResidualModel, group_by
from orchestrator.space import Layout

KAPPA_EARLY, EARLY_TRIALS = 0.5, 10  # the exploration weight of the first measured trials
KAPPA = 2.0  # and after them
KAPPA_STOP = 3.0  # stopping needs more confidence than choosing
MIN_TRIALS_BEFORE_STOP = 8
DIVERSE_PICKS = 3
DIVERSITY_TOLERANCE = 0.8  # a diverse pick may score down to 80% of the best
NAMING_SHARE = 1 / 3  # at most this share of a campaign's trial budget goes to naming it
VERIFY_TOP = 1  # the calibrated model's favourites measured right after the diverse picks


class CostGuidedSearcher(Searcher):
    residual_model = ResidualModel  # a subclass may learn its residuals under another prior
    recalibrates = True  # refit the cost model's multipliers on each result

    def __init__(self, candidates: list[Layout], cost_model: CostModel,
                 objective: Objective, *, seed: int = 0, stop_margin: float = 0.0,
                 max_repeats: int = MAX_REPEATS):
        self.candidates = list(candidates)
        self.base = cost_model
        self.model = cost_model
        self.objective = objective
        self.seed = seed
        self.stop_margin = stop_margin
        self.max_repeats = max_repeats  # measurements of one layout, its first included
        self.stop_reason: str | None = None  # why ask returns nothing, once it does
        self.space = KnobSpace.of(self.candidates)
        self.memory_scale = 1.0
        self.history: list[tuple[str, Layout, TrialResult]] = []  # (id, config, result)
        self._taken: set[Layout] = set()
        self._predictions: dict[Layout, tuple[float, float]] = {}  # gain, chance to run
        self._prior: list[tuple[np.ndarray, float]] = []
        self._repeating: set[Layout] = set()  # repeats asked, not yet told
        self._multipliers = None
        self._global_scale = 1.0
        self._precompute()
        self._refresh()

    def add_prior(self, residuals: list[tuple[Layout, float]]) -> None:
        """Residuals log(measured/predicted) seen elsewhere (warm start), on shared knobs;
        knob values this space lacks simply contribute nothing."""
        for config, residual in residuals:
            self._prior.append((self._codes.encode(knob_values(config)), residual))
        self._fit_residuals()

    # -------------------------------------------------------------- model updates

    def _precompute(self) -> None:
        """Estimate every candidate once. A calibrated step time is a combination of the
        calibration features, so refits later cost one matrix product, not a re-estimate."""
        feature_cost = feature_model(self.base)
        self._rows: dict[Layout, list[float]] = {}
        base_gain, base_step, used, reserve = [], [], [], []
        for config in self.candidates:
            est = self.base.estimate(config)
            self._rows[config] = features(feature_cost, config)
            base_gain.append(self.objective.gain(self.objective.predicted(est)))
            base_step.append(est.step_time_s)
            used.append(est.memory.total - est.memory.reserve)
            reserve.append(est.memory.reserve)
        self._matrix = np.array([self._rows[c] for c in self.candidates])
        self._index = {c: i for i, c in enumerate(self.candidates)}
        self._codes = KnobCodes(self.space.values)
        encoded = np.array([self._codes.encode(knob_values(c)) for c in self.candidates])
        self._residuals = self.residual_model(self._codes, encoded.reshape(len(self.candidates), -1))
        self._base_gain, self._base_step = np.array(base_gain), np.array(base_step)
        self._memory = MemoryBelief(np.array(used), np.array(reserve), self.base.cluster.memory_gb,
                                    memory_margin(self.base.cluster.device))

    def _refresh(self) -> None:
        """Re-predict every candidate: (gain, chance to run) under the current fit and memory
        scale (a layout that ran: 1); the gain follows the refit step time by the objective's
        `gain_exponent`."""
        step = self._base_step * self._global_scale
        if self._multipliers is not None:
            step = self._matrix @ self._multipliers
        gain = self._base_gain * (step / self._base_step) ** self.objective.gain_exponent
        chance = self._memory.chance(self.memory_scale)
        ran = {c for c, _ in self._measurements()}
        self._predictions = {c: (float(m), 1.0 if c in ran else float(p))
                             for c, m, p in zip(self.candidates, gain, chance)}

    def _measurements(self) -> list[tuple[Layout, float]]:
        """(config, gain) of every successful measurement, repeats included."""
        out = [(c, self.objective.result_gain(r)) for _, c, r in self.history]
        return [(c, v) for c, v in out if v is not None and v > 0]

    def noise(self) -> Noise:
        """The run-to-run noise of one measurement's log gain, estimated from repeats."""
        return estimate_noise(group_by([(c, math.log(v)) for c, v in self._measurements()]))

    def _fit_residuals(self) -> None:
        ok = [(c, v) for c, v in self._measurements() if c in self._index]
        width = len(self._codes.knobs)
        rows = [self._residuals.candidates[self._index[c]] for c, _ in ok]
        rows += [codes for codes, _ in self._prior]
        y = [math.log(v / self._predictions[c][0]) for c, v in ok] + [r for _, r in self._prior]
        self._residuals.fit(np.array(rows, dtype=np.int64).reshape(len(rows), width),
                            np.array(y), max(self.noise().std, NOISE_FLOOR))

    def _bounds(self, configs: list[Layout], kappa: float | None = None
                ) -> list[tuple[float, float]]:
        """(expected, upper bound at `kappa` std) of each config's gain; by default κ is the
        weight for the trials measured so far."""
        if kappa is None:
            kappa = KAPPA_EARLY if self._trials_run() < EARLY_TRIALS else KAPPA
        i = [self._index[c] for c in configs]
        base = np.array([self._predictions[c][0] * self._predictions[c][1] for c in configs])
        mean, std = self._residuals.mean[i], self._residuals.std[i]
        return list(zip(base * np.exp(mean), base * np.exp(mean + kappa * std)))

    # -------------------------------------------------------------- ask / tell

    def _trials_run(self) -> int:
        """Trials that ran (repeats included); a layout the controller pruned ran none."""
        return sum(1 for _, _, r in self.history if r.status != "infeasible")

    def _best_expected(self) -> float | None:
        """The best expected gain of a measured config (its measurements, smoothed by the
        model), the bar an unmeasured config's upper bound must reach."""
        measured = list({c for c, _ in self._measurements() if c in self._index})
        return max(e for e, _ in self._bounds(measured)) if measured else None

    def winner(self) -> Layout | None:
        """The measured config with the best mean log gain over its measurements."""
        groups = group_by([(c, math.log(v)) for c, v in self._measurements()])
        return max(groups, key=lambda c: sum(groups[c]) / len(groups[c]), default=None)

    def repeat(self, trials_left: int | None = None) -> Layout | None:
        """A measured config to measure again, once the search is over: the leader or a rival
        not yet told apart from it at the measured noise (repeats.py); the closest rival first
        and, of that pair, the less measured; the leader alone while no layout has been
        measured twice. A rival only while a repeat avoids more regret than its GPU-hours cost,
        up to `max_repeats` measurements each (repeats.py); a layout whose 2 measurements agree
        on a landscape measured noiseless, never again. Once the trials left (`trials_left`, the
        campaign's budget) are no more than the pairs need to be told apart at the measured
        noise, the search counts as over, so the last trials name the winner instead of
        measuring layouts once; never more than NAMING_SHARE of the budget, so that a small
        one still explores first. While the search goes on, None."""
        groups = group_by([(c, math.log(v)) for c, v in self._measurements()])
        if len(groups) < 2:
            return None
        standing = Standing(groups, self.noise())
        rivals = standing.rivals()
        # Without a single repeat the noise is the prior's guess: the leader is measured once
        # more to learn it, rivals or not.
        unmeasured_noise = standing.noise.dof == 0
        if not (rivals or unmeasured_noise):
            return None
        spent = self._trials_run()
        naming = (trials_left is not None and trials_left <= min(
            standing.needed(rivals, self.max_repeats) or 1, NAMING_SHARE * (spent + trials_left)))
        if not (naming or self._next() is None):  # from the told results: a resume agrees
            return None
        config = standing.next_repeat(rivals, self.max_repeats, self._repeating,
                                      lambda c: repeat_price(self.history, c))
        if config is not None:
            self._repeating.add(config)
        return config

    def running(self, layout: Layout, repeat: bool = False) -> None:
        (self._repeating if repeat else self._taken).add(layout)

    def ask(self, n: int = 1) -> list[Layout]:
        proposed: list[Layout] = []
        for _ in range(n):
            config = self._next()
            if config is None:
                break
            self._taken.add(config)
            proposed.append(config)
        return proposed

    def _next(self) -> Layout | None:
        """The next untried layout to measure, or None with `stop_reason` saying why."""
        open_ = [c for c in self.candidates if c not in self._taken and self._predictions[c][1]]
        if not open_:
            self.stop_reason = "search done: every layout that may fit in memory was tried"
            return None
        bounds = self._bounds(open_)
        best = self._best_expected()
        measured = self._trials_run()
        stoppable = best is not None and measured >= MIN_TRIALS_BEFORE_STOP
        reach = max(u for _, u in self._bounds(open_, KAPPA_STOP)) if stoppable else math.inf
        if stoppable and reach < best * (1 - self.stop_margin):
            ran = {c for c, _ in self._measurements()}
            left = family_left_to_measure(open_, [e for e, _ in bounds], ran,
                                          best * (1 - self.stop_margin))
            if left is not None:
                return left
            self.stop_reason = (
                f"search done: nothing left worth trying; the best upper bound of {len(open_)} "
                f"untried layouts is {1 - reach / best:.1%} below the best measured layout's "
                f"expected value (stop_margin {self.stop_margin:g}), and every family that "
                "could still win by the model's measured error was measured")
            return None
        self.stop_reason = None
        favourite = self._unverified_favourite()
        if favourite is not None and measured >= DIVERSE_PICKS:
            return favourite
        order = sorted(range(len(open_)), key=lambda i: -bounds[i][1])
        if len(self._taken) < DIVERSE_PICKS and not self._prior:
            seen = {regime(c) for c in self._taken}
            top = bounds[order[0]][1]
            for i in order:
                if bounds[i][1] < DIVERSITY_TOLERANCE * top:
                    break
                if regime(open_[i]) not in seen:
                    return open_[i]
        return open_[order[0]]

    def _unverified_favourite(self) -> Layout | None:
        """The best of the calibrated model's VERIFY_TOP fitting layouts not yet measured
        (residuals aside), or None once all of them have been."""
        fitting = [c for c in self.candidates if self._predictions[c][1] == 1.0]
        top = sorted(fitting, key=lambda c: -self._predictions[c][0])[:VERIFY_TOP]
        return next((c for c in top if c not in self._taken), None)

    def tell(self, layout: Layout, result: TrialResult) -> None:
        self._taken.add(layout)
        self._repeating.discard(layout)
        self.history.append((f"t{len(self.history) + 1:04d}", layout, result))
        if result.status == "oom" and layout in self._rows:
            # Every layout predicted to need as much or more is skipped from now on.
            self._memory.out_of_memory(self._index[layout])
        fit = (calibrate(self.base, self.history, feature_rows=self._rows, gathers_apart=False)
               if self.recalibrates else None)
        if fit is not None:
            self.model = fit.model
            if fit.global_scale is not None:
                self._multipliers, self._global_scale = None, fit.global_scale
            else:
                self._multipliers = np.array([fit.multipliers[f] for f in FEATURES])
        self.memory_scale = max(fit.memory_scale if fit else 1.0, self._memory.oom_scale)
        self._refresh()
        self._fit_residuals()
