"""Calibrating on a slice of the target cluster: the slice's trials set what a rank does with
its model-parallel peers, and the data-parallel collectives of the target keep the model's
own cost, since the slice never ran them at the target's width."""

from __future__ import annotations

import pytest
from builders import layout

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.calibration import calibrate_from_slice
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.result import TrialResult

MODEL, CLUSTER = MODEL_PRESETS["llama-7b"], CLUSTER_PRESETS["a800-80g"]
SLICE, TARGET = 8, 128  # one node, sixteen


def truth(gpus: int) -> CostModel:
    """A cluster whose ranks compute 1.3 times slower than the preset says and whose network
    is the preset's."""
    cost = CostModel(MODEL, CLUSTER, gpus)
    c = cost.coefficients
    return cost.with_coefficients(c.with_(scale_compute=c.scale_compute * 1.3,
                                          scale_bubble=c.scale_bubble * 1.3,
                                          scale_model_parallel_comm=c.scale_model_parallel_comm * 1.3,
                                          scale_model_parallel_latency=c.scale_model_parallel_latency * 1.3))


def slice_trials() -> list:
    out = []
    for i, (tp, micro) in enumerate([(1, 1), (2, 2), (4, 1)]):
        config = layout(ranks=SLICE, tp=tp, micro_batch_size=micro, grad_accum_steps=8 // micro)
        est = truth(SLICE).estimate(config)
        out.append((f"t{i}", config, TrialResult(status="ok", step_time_s=est.step_time_s,
                                                 tokens_per_s=est.tokens_per_step / est.step_time_s)))
    return out


def test_the_target_is_predicted_from_the_slice():
    fit = calibrate_from_slice(CostModel(MODEL, CLUSTER, SLICE), slice_trials())
    assert fit.global_scale == pytest.approx(1.3, rel=1e-6)
    target = CostModel(MODEL, CLUSTER, TARGET).with_coefficients(fit.model.coefficients)
    for tp, micro in [(1, 1), (2, 2), (8, 4)]:
        config = layout(ranks=TARGET, tp=tp, micro_batch_size=micro, grad_accum_steps=8 // micro)
        assert target.estimate(config).step_time_s == pytest.approx(
            truth(TARGET).estimate(config).step_time_s, rel=1e-6)


def test_the_target_collectives_are_not_scaled_by_the_slice():
    """Scaling the whole prediction by the slice's factor would charge the target's wider
    data-parallel collectives 1.3 times what the network costs."""
    fit = calibrate_from_slice(CostModel(MODEL, CLUSTER, SLICE), slice_trials())
    config = layout(ranks=TARGET, tp=1, grad_accum_steps=8)
    target = CostModel(MODEL, CLUSTER, TARGET)
    stock = target.estimate(config).time
    calibrated = target.with_coefficients(fit.model.coefficients).estimate(config).time
    assert stock.dp_comm.total > 0
    assert calibrated.dp_comm.total == pytest.approx(stock.dp_comm.total)
    assert calibrated.compute_s == pytest.approx(1.3 * stock.compute_s)


def test_no_successful_trial_gives_no_calibration():
    failed = [("t0", layout(ranks=SLICE, tp=1, grad_accum_steps=8), TrialResult(status="oom"))]
    assert calibrate_from_slice(CostModel(MODEL, CLUSTER, SLICE), failed) is None
