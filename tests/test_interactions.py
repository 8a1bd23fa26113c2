"""Landscapes whose truth depends on several knobs at once, and the cost-guided searcher on them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import EXAMPLES

from orchestrator.backends import quirks
from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.costmodel import cost_model_for
from orchestrator.searchers.encoding import KnobSpace, knob_values
from orchestrator.spec import load_spec


@pytest.fixture(scope="module")
def frontier():
    spec = load_spec(EXAMPLES / "frontier-175b.yaml")
    cost = cost_model_for(spec)
    return [c for c in spec.search_space().candidates() if cost.estimate(c).fits], cost


def _additive_misfit(configs, log_truth) -> float:
    """RMS of what a sum of one effect per knob value cannot explain."""
    space = KnobSpace.of(configs)
    x = np.array([[1.0] + [float(knob_values(c)[k] == v) for k, vs in space.values.items()
                           for v in vs] for c in configs])
    y = np.array(log_truth)
    fit, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(np.sqrt(np.mean((x @ fit - y) ** 2)))


def test_interaction_quirks_are_seeded_and_not_a_sum_of_knob_effects(frontier):
    configs, cost = frontier
    sim = SimulatedBackend(cost, seed=3, interactions=1.0)
    log_truth = [math.log(sim.truth_factor(c.to_params())) for c in configs]
    assert _additive_misfit(configs, log_truth) > 0.04  # per-knob effects cannot explain it
    again = SimulatedBackend(cost, seed=3, interactions=1.0)
    assert [again.truth_factor(c.to_params()) for c in configs] == \
        [sim.truth_factor(c.to_params()) for c in configs]
    other = SimulatedBackend(cost, seed=4, interactions=1.0)
    assert [other.truth_factor(c.to_params()) for c in configs] != \
        [sim.truth_factor(c.to_params()) for c in configs]
    off = SimulatedBackend(cost, seed=3)
    assert {off.truth_factor(c.to_params()) for c in configs} == {1.0}


def test_each_quirk_depends_on_the_knobs_it_names():
    base = {"tp": 2, "pp": 4, "dp": 64, "zero_stage": 1, "micro_batch_size": 2,
            "activation_checkpointing": "selective"}
    hit = next(s for s in range(200) if quirks.collective(s, base) < 0)
    full = dict(base, activation_checkpointing="full")
    assert quirks.collective(hit, full) == pytest.approx(
        math.log(1 - (1 - math.exp(quirks.collective(hit, base))) / 2))  # recompute overlaps half
    layouts = {quirks.collective(hit, dict(base, dp=dp, zero_stage=z)) < 0
               for dp in (16, 32, 64, 128) for z in (0, 1)}
    assert layouts == {True, False}  # only some (tp, layout) pairs fall off the fast path
    fast = next(s for s in range(200) if quirks.kernel(s, base) > 0)
    assert {quirks.kernel(fast, dict(base, micro_batch_size=m, tp=t)) > 0
            for m in (1, 2, 4, 8) for t in (1, 2, 4, 8)} == {True, False}
    shallow, deep = quirks.product(0, dict(base, pp=2)), quirks.product(0, dict(base, pp=16))
    assert deep < shallow < 0
    assert quirks.product(0, dict(base, pp=16, micro_batch_size=1, tp=1,
                                  activation_checkpointing="full")) == 0.0
