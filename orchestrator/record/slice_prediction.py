"""A slice campaign's prediction at its target: the cost model calibrated on the slice's
trials (costmodel/calibration.py `calibrate_from_slice`: the rank's own and model-parallel work
scaled, the data-parallel collectives left to the model at the target's width), and what it
still got wrong on a measured layout carried to that layout's target (the same work per GPU).
Read from the record, so the controller that confirms, `status` and the report agree."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.common.objective import Objective
from orchestrator.costmodel.calibration import Calibration, calibrate_from_slice
from orchestrator.record.best import FULL_PHASES
from orchestrator.record.journal import TrialRecord
from orchestrator.space import ParallelConfig
from orchestrator.space.rescaled import scaled_config
from orchestrator.spec import CampaignSpec
from orchestrator.spec.planning import cost_model_for, fitted_candidates
from orchestrator.spec.slice_scale import slice_spec


@dataclass(frozen=True)
class TargetPrediction:
    config: ParallelConfig  # at the target
    slice_config: ParallelConfig | None  # what runs on the slice; None: not measurable there
    value: float  # the objective's metric predicted at the target
    measured_on_slice: bool  # its slice layout has a successful full measurement
    gpu_hours: float  # a full-scale trial of it, predicted (world x steps x step time)
    # Whether a full-scale trial of it rests on evidence: it ran on the slice (the same memory
    # per GPU, or less where ZeRO shards over the wider target), or the slice cannot hold it
    # and the calibrated memory model says it fits outright. A layout whose slice image failed,
    # or that the slice could have run but the search passed over, is priced only.
    confirmable: bool = True


def slice_measurements(records: list[TrialRecord]) -> dict[ParallelConfig, list[float]]:
    """The slice's successful full measurements, step times by layout."""
    found: dict[ParallelConfig, list[float]] = {}
    for r in records:
        if r.phase in FULL_PHASES and r.result is not None and r.result.ok \
                and r.result.step_time_s and math.isfinite(r.result.step_time_s):
            found.setdefault(r.config, []).append(r.result.step_time_s)
    return found


def slice_calibration(spec: CampaignSpec, records: list[TrialRecord]) -> Calibration | None:
    measured = slice_measurements(records)
    trials = [(r.trial_id, r.config, r.result) for r in records
              if r.phase in FULL_PHASES and r.config in measured and r.result.ok]
    return calibrate_from_slice(cost_model_for(spec), trials)


def predict_target(spec: CampaignSpec, records: list[TrialRecord], objective: Objective
                   ) -> list[TargetPrediction]:
    """Every target layout of the space, best predicted first."""
    base = cost_model_for(spec)
    fit = slice_calibration(spec, records)
    model = base if fit is None else base.with_coefficients(fit.model.coefficients)
    measured = slice_measurements(records)
    failed = {r.config for r in records if r.result is not None and not r.result.ok
              and r.result.status != "infeasible"}
    memory_scale = fit.memory_scale if fit is not None else 1.0
    nodes, slice_nodes = spec.scale.nodes, spec.scale.slice_nodes or spec.scale.nodes
    per_step = 1 if objective.metric == "step_time_s" else -1  # metric ~ step time ** per_step
    steps = spec.trial.steps + spec.trial.warmup_steps
    out = []
    for config in fitted_candidates(spec):
        estimate = model.estimate(config)
        if estimate.prunable:  # beyond the memory margin, as a campaign prunes it
            continue
        on_slice = scaled_config(config, nodes, slice_nodes, "weak")
        value = objective.predicted(estimate)
        times = measured.get(on_slice) if on_slice is not None else None
        if times:
            residual = (sum(times) / len(times)) / model.estimate(on_slice).step_time_s
            value *= residual ** per_step
        step_s = estimate.step_time_s * (residual if times else 1.0)
        confirmable = bool(times) or (on_slice is None and estimate.fits_scaled(memory_scale))
        out.append(TargetPrediction(config, on_slice, value, bool(times),
                                    config.world_size * steps * step_s / 3600,
                                    confirmable and on_slice not in failed))
    return objective.ranked(out, lambda p: p.value)

