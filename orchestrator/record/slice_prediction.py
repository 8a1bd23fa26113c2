"""A slice campaign's prediction at its target: the cost model calibrated on the slice's
trials (costmodel/calibration.py `calibrate_from_slice`: the rank's own and model-parallel work
scaled, the data-parallel collectives left to the model at the target's width), and what it
still got wrong on the slice, carried to each target layout like the ones measured (a slice
keeps each GPU's work); once layouts are measured at the target, what its data-parallel
collectives cost there corrects the rest. Read from the record, so the controller that
confirms, `status` and the report agree."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from orchestrator.common.objective import Objective
from orchestrator.costmodel.calibration import Calibration, calibrate_from_slice
from orchestrator.record.best import FULL_PHASES
from orchestrator.record.journal import TARGET, TrialRecord
from orchestrator.search.encoding import KnobSpace, knob_values
from orchestrator.search.repeats import estimate_noise
from orchestrator.search.residuals import NOISE_FLOOR, KnobCodes, ResidualModel, group_by
from orchestrator.space import Layout
from orchestrator.space.rescaled import scaled_config
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates


@dataclass(frozen=True)
class TargetPrediction:
    config: Layout  # at the target
    slice_config: Layout | None  # what runs on the slice; None: not measurable there
    value: float  # the objective's metric predicted at the target
    upper: float  # the same, one standard deviation of the slice's residual model better
    measured_on_slice: bool  # its slice layout has a successful full measurement
    gpu_hours: float  # a full-scale trial of it, predicted (world x steps x step time)
    # Whether a full-scale trial of it may be risked: it ran on the slice (the same memory per
    # GPU, or less where ZeRO shards over the wider target), or the calibrated memory model
    # says it fits outright (a risky layout is measured on a slice, never first at full scale).
    # A layout whose slice image failed is priced only.
    confirmable: bool = True


def slice_measurements(records: list[TrialRecord]) -> dict[Layout, list[float]]:
    """The slice's successful full measurements, step times by layout."""
    found: dict[Layout, list[float]] = {}
    for r in records:
        if r.phase in FULL_PHASES and r.result is not None and r.result.ok \
                and r.result.step_time_s and math.isfinite(r.result.step_time_s):
            found.setdefault(r.config, []).append(r.result.step_time_s)
    return found


def slice_calibration(spec: CampaignSpec, records: list[TrialRecord]) -> Calibration | None:
    measured = slice_measurements(records)
    trials = [(r.trial_id, r.config, r.result) for r in records
              if r.phase in FULL_PHASES and r.result is not None and r.result.ok
              and r.config in measured]
    return calibrate_from_slice(cost_model_for(spec), trials)


def slice_residuals(model, configs: list[Layout],
                    measured: dict[Layout, list[float]]) -> tuple[list[float], list[float]]:
    """What the slice says the model gets wrong on each target layout, log(predicted /
    measured step time): the cost-guided searcher's model of residuals (search/residuals.py,
    an effect per knob value and per pair) fitted to the slice's measurements, whose knob
    values are their target layouts' (a slice changes only the data-parallel width). A
    layout near ones measured on the slice shares what they showed. With each, its posterior
    std: how far that may be off (the prior's where nothing was measured)."""
    if not configs:
        return [], []
    codes = KnobCodes(KnobSpace.of(configs).values)
    fit = ResidualModel(codes, np.array([codes.encode(knob_values(c)) for c in configs]))
    if not measured:
        return [0.0] * len(configs), [float(s) for s in fit.std]
    rows, logs = [], []
    for config, times in measured.items():
        predicted = model.estimate(config).step_time_s
        for step in times:
            rows.append(codes.encode(knob_values(config)))
            logs.append(math.log(predicted / step))
    noise = estimate_noise(group_by([(c, -math.log(s)) for c, ts in measured.items()
                                     for s in ts]))
    fit.fit(np.array(rows, dtype=np.int64), np.array(logs), max(noise.std, NOISE_FLOOR))
    return [float(m) for m in fit.mean], [float(s) for s in fit.std]


def target_correction(steps: dict[Layout, tuple[float, float]],
                      records: list[TrialRecord]) -> float:
    """How much more (or less) the target's data-parallel collectives cost than the model
    says, as a share of them, from the layouts measured at the target (`steps`: a target
    layout's predicted step and data-parallel collective time): the one term a slice cannot
    measure, learnt from the first full-scale trials. 0 before any."""
    shares = []
    for r in records:
        if r.phase == TARGET and r.result is not None and r.result.ok and r.config in steps:
            predicted, collectives = steps[r.config]
            if collectives > 0:
                shares.append((r.result.step_time_s - predicted) / collectives)
    return max(-1.0, statistics.median(shares)) if shares else 0.0


def predict_target(spec: CampaignSpec, records: list[TrialRecord], objective: Objective,
                   candidates: list[Layout] | None = None) -> list[TargetPrediction]:
    """Every target layout of the space (`candidates`, the spec's own by default), best
    predicted first: the slice-calibrated model, what the slice's measurements say it gets
    wrong on each layout, and the target's measured correction of its data-parallel
    collectives."""
    base = cost_model_for(spec)
    fit = slice_calibration(spec, records)
    model = base if fit is None else base.with_coefficients(fit.model.coefficients)
    measured = slice_measurements(records)
    failed = {r.config for r in records if r.result is not None and not r.result.ok
              and r.result.status != "infeasible"}
    memory_scale = fit.memory_scale if fit is not None else 1.0
    nodes, slice_nodes = spec.scale.nodes, spec.scale.slice_nodes or spec.scale.nodes
    per_step = 1 if objective.metric == "step_time_s" else -1  # metric ~ step time ** per_step
    trial_steps = spec.trial.steps + spec.trial.warmup_steps
    configs = candidates if candidates is not None else fitted_candidates(spec)
    estimates = {c: model.estimate(c) for c in configs}
    configs = [c for c in configs if not estimates[c].prunable]  # as a campaign prunes them
    means, stds = slice_residuals(model, configs, measured)
    priced = []  # (config, its slice layout, estimate, predicted step before the correction, std)
    for config, residual, std in zip(configs, means, stds):
        estimate = estimates[config]
        on_slice = scaled_config(config, nodes, slice_nodes, "weak")
        priced.append((config, on_slice, estimate, estimate.step_time_s * math.exp(-residual),
                       std))
    kappa = target_correction({c: (s, e.time.dp_comm.total) for c, _, e, s, _ in priced},
                              records)
    out = []
    for config, on_slice, estimate, step_s, std in priced:
        step_s += kappa * estimate.time.dp_comm.total
        value = objective.predicted(estimate) * (step_s / estimate.step_time_s) ** per_step
        upper = value * math.exp(std) if objective.maximise else value * math.exp(-std)
        ran = on_slice in measured
        confirmable = ran or estimate.fits_scaled(memory_scale)
        out.append(TargetPrediction(config, on_slice, value, upper, ran,
                                    config.world_size * trial_steps * step_s / 3600,
                                    confirmable and on_slice not in failed))
    return objective.ranked(out, lambda p: p.value)
