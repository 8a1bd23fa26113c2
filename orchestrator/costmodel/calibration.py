"""Calibration: refit the cost model's coefficients to measured trials (least squares).

The predicted step time is a sum of terms: compute, bubble, model-parallel communication
(its bandwidth part and its per-step latency part apart: TP's many small all-reduces are
latency-bound where PP's sends and large micro-batches are not, and a cluster's α and β are
independent), exposed data-parallel communication (weight gathers apart from gradient and
optimizer synchronization: they overlap by different mechanisms), and a fixed cost per layer
and micro-batch. Calibration finds non-negative multipliers for the first six and the fixed
cost (NNLS on the measured step times), so the refit model is the same model with its
efficiency and overlap scaled to what this cluster showed; the data-parallel multiplier
applies to the raw communication, so it is the exposed fraction this cluster showed. Memory
gets one ratio of measured to predicted (without the fragmentation reserve, which no
measurement sees); pruning applies it, and while no trial measured memory it is 1.0 and
reported as not measured. `held_out_errors` predicts each trial from a refit on
the others: the error that matters to a searcher, which the in-sample error understates.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.estimate import CostModel
from orchestrator.result import TrialResult
from orchestrator.space import Layout

FEATURES = ("compute", "bubble", "model_parallel_comm", "model_parallel_latency",
            "data_parallel_comm", "data_parallel_gathers", "launches")
MIN_TRIALS = 3


@dataclass(frozen=True)
class TrialFit:
    trial_id: str
    config: Layout
    measured_tokens_per_s: float
    predicted_tokens_per_s: float

    @property
    def error(self) -> float:
        """Relative error of the prediction: (predicted - measured) / measured."""
        return self.predicted_tokens_per_s / self.measured_tokens_per_s - 1


@dataclass(frozen=True)
class Calibration:
    model: CostModel
    memory_scale: float
    trials: list[TrialFit]
    multipliers: dict[str, float]
    # Set while too few trials exist to fit every term: one factor on the whole prediction.
    global_scale: float | None = None
    # False when no trial measured its peak memory: memory_scale is then the neutral 1.0 that
    # pruning multiplies by, not a measurement, and to_dict says None.
    memory_measured: bool = True

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(t.error) for t in self.trials)

    @property
    def spearman(self) -> float:
        return spearman([t.predicted_tokens_per_s for t in self.trials],
                        [t.measured_tokens_per_s for t in self.trials])

    def to_dict(self) -> dict:
        c = self.model.coefficients
        return {
            "trials": len(self.trials),
            "median_abs_error": self.median_abs_error,
            "spearman": self.spearman,
            "memory_scale": self.memory_scale if self.memory_measured else None,
            "multipliers": self.multipliers,
            "compute_efficiency": self.model.cluster.compute_efficiency / c.scale_compute
            if c.scale_compute else None,
            "per_trial": [
                {"trial_id": t.trial_id, "config": t.config.key(),
                 "measured_tokens_per_s": t.measured_tokens_per_s,
                 "predicted_tokens_per_s": t.predicted_tokens_per_s, "error": t.error}
                for t in self.trials
            ],
        }


def feature_model(cost: CostModel) -> CostModel:
    """The model whose step-time terms are the features: unit multipliers, no fixed cost."""
    return cost.with_coefficients(cost.coefficients.with_(
        scale_compute=1.0, scale_bubble=1.0, scale_model_parallel_comm=1.0,
        scale_model_parallel_latency=1.0, scale_data_parallel_comm=1.0, launch_overhead_s=0.0,
        dp_exposure=None, dp_exposure_gathers=None))


def features(feature_cost: CostModel, layout: Layout) -> list[float]:
    """The terms a calibrated step time is a non-negative combination of (see FEATURES)."""
    t = feature_cost.estimate(layout).time
    layers = layout.busiest_stage_layers(feature_cost.model.num_layers)
    latency = t.model_parallel_latency_s
    gathers = t.dp_comm.t_p
    # The optimizer step (the host's, with offload) is the rank's own work too: calibration
    # scales it with compute. The context-parallel exchange is model-parallel communication.
    return [t.compute_s + t.optimizer_s + t.offload_s, t.bubble_s,
            t.tp_comm_s + t.pp_comm_s + t.ep_comm_s + t.cp_comm_s - latency,
            latency, t.dp_comm.total - gathers, gathers, float(layers * layout.grad_accum_steps)]


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    if len(a) < 2:
        return float("nan")
    value = spearmanr(a, b).statistic
    return float(value) if value == value else float("nan")


def calibrate(
    cost: CostModel,
    measured: list[tuple[str, Layout, TrialResult]],
    feature_rows: dict[Layout, list[float]] | None = None,
    gathers_apart: bool = True,
) -> Calibration | None:
    """Fit on the trials that ended ok; None until MIN_TRIALS of them exist. `feature_rows`
    may hold precomputed `features` per config (a searcher refitting after every trial).
    Weight gathers get an exposed fraction of their own only with `gathers_apart` and twice
    as many trials as terms; otherwise they share gradient sync's (a searcher refitting from
    few trials chases noise with the extra term)."""
    import numpy as np

    ok = successful(measured)
    if len(ok) < MIN_TRIALS:
        return None
    base = feature_model(cost)
    rows = feature_rows or {}
    x = np.array([rows[c] if c in rows else features(base, c) for _, c, _ in ok])
    y = np.array([r.step_time_s for _, _, r in ok])
    fitted = fit_terms(x, y, gathers_apart)
    if fitted is None:
        return _global_fit(cost, ok)
    return _finish(cost.with_coefficients(with_terms(cost.coefficients, fitted)), ok, fitted)


def fit_terms(x, y, gathers_apart: bool = True) -> dict[str, float] | None:
    """Each FEATURES term's multiplier, fitted to the step times `y` of rows `x` (their
    `features`, each row from its own model's: rows of several models of one cluster fit
    together); None with fewer rows than twice the terms present (`calibrate` then scales
    the whole prediction)."""
    import numpy as np
    from scipy.optimize import nnls

    x = np.array(x, dtype=float)
    y = np.asarray(y, dtype=float)
    gathers = FEATURES.index("data_parallel_gathers")
    used = [i for i in range(len(FEATURES)) if x[:, i].any()]  # drop terms absent everywhere
    if gathers in used and (not gathers_apart or len(y) < 2 * len(used)):
        x[:, FEATURES.index("data_parallel_comm")] += x[:, gathers]  # one DP fraction
        x[:, gathers] = 0.0
        used.remove(gathers)
    if len(y) < 2 * len(used):
        return None
    # Relative least squares: weight each trial by 1/measured so fast and slow trials count alike.
    weights = 1 / y
    solution, _ = nnls(x[:, used] * weights[:, None], y * weights)
    # Terms absent from every measured trial keep their analytic weight (no fixed cost).
    fitted = {name: (0.0 if name == "launches" else 1.0) for name in FEATURES}
    fitted.update({FEATURES[i]: float(v) for i, v in zip(used, solution)})
    if fitted["compute"] <= 0:  # compute must cost something; keep the analytic value
        fitted["compute"] = 1.0
    if gathers not in used:  # no sharded weights measured, or pooled
        fitted["data_parallel_gathers"] = fitted["data_parallel_comm"]
    return fitted


def with_terms(c: Coefficients, fitted: dict[str, float]) -> Coefficients:
    """`c` with the multipliers `fit_terms` fitted."""
    return c.with_(
        scale_compute=fitted["compute"], scale_bubble=fitted["bubble"],
        scale_model_parallel_comm=fitted["model_parallel_comm"],
        scale_model_parallel_latency=fitted["model_parallel_latency"],
        dp_exposure=fitted["data_parallel_comm"],
        dp_exposure_gathers=fitted["data_parallel_gathers"], launch_overhead_s=fitted["launches"],
    )


def successful(measured: list[tuple[str, Layout, TrialResult]]) -> list:
    """The trials that ended ok with a finite step time: the only ones a fit can use."""
    return [(tid, c, r) for tid, c, r in measured
            if r.ok and r.step_time_s and math.isfinite(r.step_time_s)]


def held_out_errors(cost: CostModel, measured: list[tuple[str, Layout, TrialResult]]
                    ) -> list[float] | None:
    """Each successful trial predicted by the model refit on all the others, from `cost`:
    calibration's error on a layout it has not measured, which is how a searcher uses it
    (the in-sample error only says how well the terms can bend to the trials). None while
    one trial left out leaves too few to fit."""
    ok = successful(measured)
    if len(ok) <= MIN_TRIALS:
        return None
    base = feature_model(cost)
    rows = {c: features(base, c) for _, c, _ in ok}
    errors = []
    for i, (_, config, result) in enumerate(ok):
        fit = calibrate(cost, ok[:i] + ok[i + 1:], feature_rows=rows)
        errors.append(fit.model.estimate(config).tokens_per_s / result.tokens_per_s - 1)
    return errors


def evaluate(cost: CostModel, measured: list[tuple[str, Layout, TrialResult]]
             ) -> Calibration | None:
    """The model's errors on the trials as it is, before any calibration (a stock or a
    profiled preset); None without a successful trial."""
    ok = successful(measured)
    return _finish(cost, ok, {}) if ok else None


def calibrate_from_slice(cost: CostModel,
                         measured: list[tuple[str, Layout, TrialResult]]
                         ) -> Calibration | None:
    """Fit on trials run on a slice of the target cluster, to predict the target: what a
    rank does on its own and with its model-parallel peers (compute, the optimizer step, the
    pipeline bubble, tensor/pipeline/context/expert communication) is the same work at any
    data-parallel width, so the slice's trials measure it, one factor on those terms together;
    the data-parallel collectives, which grow with the nodes they span, keep the model's
    analytic cost (its collective model, or `paratune profile`'s fit where the cluster preset
    has one). A slice's trials share their data-parallel width, so fitting that term to them
    would only learn the slice's network. None without a successful trial."""
    ok = successful(measured)
    if not ok:
        return None
    ratios = []
    for _, config, result in ok:
        t = cost.estimate(config).time
        own = (t.compute_s + t.optimizer_s + t.offload_s + t.bubble_s + t.tp_comm_s
               + t.pp_comm_s + t.ep_comm_s + t.cp_comm_s)
        rest = t.total_s - own
        if own > 0 and result.step_time_s > rest:
            ratios.append((result.step_time_s - rest) / own)
    if not ratios:  # the slice ran faster than its collectives alone: scale the whole
        return _global_fit(cost, ok)
    scale = statistics.median(ratios)
    c = cost.coefficients
    model = cost.with_coefficients(c.with_(
        scale_compute=c.scale_compute * scale, scale_bubble=c.scale_bubble * scale,
        scale_model_parallel_comm=c.scale_model_parallel_comm * scale,
        scale_model_parallel_latency=c.scale_model_parallel_latency * scale))
    return _finish(model, ok, {}, global_scale=scale)


def _global_fit(cost: CostModel, ok: list) -> Calibration:
    """Fewer trials than twice the terms: fitting each term would chase noise, so scale the
    whole prediction by the median measured/predicted ratio and keep the model's ranking."""
    ratios = [r.step_time_s / cost.estimate(c).step_time_s for _, c, r in ok]
    scale = statistics.median(ratios)
    return _finish(cost.with_coefficients(scaled(cost.coefficients, scale)), ok, {},
                   global_scale=scale)


def scaled(c: Coefficients, scale: float) -> Coefficients:
    """`c` with every term of the step time `scale` times as long: the ranking kept."""
    return c.with_(
        scale_compute=c.scale_compute * scale, scale_bubble=c.scale_bubble * scale,
        scale_model_parallel_comm=c.scale_model_parallel_comm * scale,
        scale_model_parallel_latency=c.scale_model_parallel_latency * scale,
        scale_data_parallel_comm=c.scale_data_parallel_comm * scale,
        launch_overhead_s=c.launch_overhead_s * scale,
        dp_exposure=None if c.dp_exposure is None else c.dp_exposure * scale,
        dp_exposure_gathers=(None if c.dp_exposure_gathers is None
                             else c.dp_exposure_gathers * scale),
    )


def _finish(model: CostModel, ok: list, fitted: dict, global_scale: float | None = None):
    memory = [r.peak_memory_gb / model.estimate(c).memory_gb_used for _, c, r in ok
              if r.peak_memory_gb]
    fits = [TrialFit(tid, c, r.tokens_per_s, model.estimate(c).tokens_per_s) for tid, c, r in ok]
    return Calibration(model, statistics.median(memory) if memory else 1.0, fits, fitted,
                       global_scale, memory_measured=bool(memory))
