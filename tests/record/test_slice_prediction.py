"""A slice campaign's prediction at its target, read from its record: what the slice measured
reaches the layouts near the measured ones, and what the first full-scale trials measured
corrects the target's data-parallel collectives."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from orchestrator.common.objective import Objective
from orchestrator.record.journal import SEARCH, TARGET, TrialRecord
from orchestrator.record.slice_prediction import predict_target, slice_calibration
from orchestrator.result import TrialResult
from orchestrator.space.rescaled import scaled_config
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates

SPEC = load_spec(EXAMPLES / "frontier-175b.yaml", ["scale.slice_nodes=16"])
NODES, SLICE = SPEC.scale.nodes, SPEC.scale.slice_nodes
TARGETS = [c for c in fitted_candidates(SPEC) if cost_model_for(SPEC).estimate(c).fits
           and scaled_config(c, NODES, SLICE, "weak") is not None]


def _record(i: int, config, step_s: float, phase: str = SEARCH) -> TrialRecord:
    return TrialRecord(f"t{i:04d}", config, result=TrialResult(status="ok", step_time_s=step_s),
                       phase=phase)


def _on_slice(config):
    return scaled_config(config, NODES, SLICE, "weak")


def _predicted(records) -> dict:
    return {p.config: p for p in predict_target(SPEC, records, Objective(), TARGETS)}


def test_what_the_slice_measured_reaches_unmeasured_layouts_like_it():
    """tp 8 runs 30% faster than the model says, tp 4 as it says: an unmeasured tp 8 layout
    gains on its tp 4 twin."""
    cost = cost_model_for(SPEC)

    def same_but_tp(a, b) -> bool:
        return (a.pp, a.micro_batch_size, a.activation_checkpointing, a.zero_stage) == \
            (b.pp, b.micro_batch_size, b.activation_checkpointing, b.zero_stage)

    unmeasured, twin = next((a, b) for a in TARGETS for b in TARGETS
                            if a.tp == 8 and b.tp == 4 and same_but_tp(a, b))
    tp8 = [c for c in TARGETS if c.tp == 8 and c != unmeasured][:3]
    tp4 = [c for c in TARGETS if c.tp == 4 and c != twin][:3]
    records = [_record(i, _on_slice(c), cost.estimate(_on_slice(c)).step_time_s * 0.7)
               for i, c in enumerate(tp8)]
    records += [_record(10 + i, _on_slice(c), cost.estimate(_on_slice(c)).step_time_s)
                for i, c in enumerate(tp4)]
    before = _predicted([])
    after = _predicted(records)
    ratio_before = before[unmeasured].value / before[twin].value
    ratio_after = after[unmeasured].value / after[twin].value
    assert ratio_after > 1.1 * ratio_before
    assert after[tp8[0]].measured_on_slice and not after[unmeasured].measured_on_slice


def test_a_target_measurement_corrects_the_data_parallel_collectives():
    cost = cost_model_for(SPEC)
    measured = [c for c in TARGETS if c.zero_stage == 0][:3]
    slice_records = [_record(i, _on_slice(c), cost.estimate(_on_slice(c)).step_time_s)
                     for i, c in enumerate(measured)]
    fit = slice_calibration(SPEC, slice_records)
    model = cost.with_coefficients(fit.model.coefficients)
    confirmed = measured[0]
    est = model.estimate(confirmed)
    assert est.time.dp_comm.total > 0
    slower = est.step_time_s + 0.5 * est.time.dp_comm.total  # its collectives 1.5x the model's
    before = _predicted(slice_records)[confirmed]
    after = _predicted(slice_records + [_record(99, confirmed, slower, TARGET)])[confirmed]
    tokens = est.tokens_per_step
    assert before.value == pytest.approx(tokens / est.step_time_s, rel=0.02)
    assert after.value == pytest.approx(tokens / slower, rel=0.02)


def test_a_layout_that_failed_on_the_slice_is_not_risked_at_the_target():
    config = TARGETS[0]
    failed = TrialRecord("t0001", _on_slice(config), result=TrialResult(status="oom"))
    assert not _predicted([failed])[config].confirmable
