"""The cost-guided searcher and the memory margin: a layout the model puts over the device but
within its margin (`risky`) is a candidate weighed by its chance to run, not pruned; an
out-of-memory run rules out every layout predicted to need as much or more."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import EXAMPLES

from orchestrator.common.objective import Objective
from orchestrator.costmodel.fit_verdict import MEMORY_MARGIN, RISKY, fit_chance
from orchestrator.result import TrialResult
from orchestrator.search import make_searcher
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for


def test_the_chance_to_run_falls_across_the_margin():
    need = np.array([0.5, 1.0, 1 + MEMORY_MARGIN / 2, 1 + MEMORY_MARGIN, 3.0])
    assert fit_chance(need).tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.0])
    assert fit_chance(need, margin=0.0).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]  # a CPU


def _risky_only():
    """frontier-175b on devices so small that no layout fits and some are risky."""
    spec = load_spec(EXAMPLES / "frontier-175b.yaml", ["cluster.memory_gb=12"])
    cost = cost_model_for(spec)
    candidates = spec.search_space().candidates()
    verdicts = {c: cost.estimate(c).memory_verdict for c in candidates}
    assert RISKY in verdicts.values() and "fits" not in verdicts.values()
    return candidates, cost, verdicts


def test_a_space_of_risky_layouts_is_searched():
    candidates, cost, verdicts = _risky_only()
    searcher = make_searcher("cost-guided", candidates, Objective(), seed=0, cost_model=cost)
    (first,) = searcher.ask(1)
    assert verdicts[first] == RISKY


def test_an_out_of_memory_run_rules_out_the_layouts_that_need_more():
    candidates, cost, verdicts = _risky_only()
    searcher = make_searcher("cost-guided", candidates, Objective(), seed=0, cost_model=cost)
    used = {c: cost.estimate(c).memory_gb_used for c in candidates}
    risky = sorted((c for c in candidates if verdicts[c] == RISKY), key=used.get)
    middle = risky[len(risky) // 2]
    searcher.tell(middle, TrialResult(status="oom", world_size=middle.world_size))
    proposed = searcher.ask(len(candidates))
    assert proposed and set(proposed) <= set(risky[:len(risky) // 2])


def test_the_simulated_backend_runs_a_risky_layout_with_its_chance():
    """The simulated truth meets what the margin assumes: over seeds, a risky layout runs about
    as often as its chance says, and one that runs reports the device nearly full."""
    from orchestrator.backends.simulated import SimulatedBackend
    from orchestrator.costmodel.memory import GB

    candidates, cost, verdicts = _risky_only()
    for config in (c for c in candidates if verdicts[c] == RISKY):
        est = cost.estimate(config)
        need = (est.memory.total / GB) / est.capacity_gb
        runs = [SimulatedBackend(cost, seed=seed).run(config, "t1") for seed in range(200)]
        ran = [r for r in runs if r.ok]
        assert len(ran) / len(runs) == pytest.approx(float(fit_chance(need)), abs=0.1)
        assert all(r.peak_memory_gb <= est.capacity_gb for r in ran)
        assert all(r.status == "oom" for r in runs if not r.ok)
