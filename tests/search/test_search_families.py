"""Before the cost-guided search stops, every tp x pp x cp x ep family that the model's error on
real measurements says could still win has been measured (orchestrator/search/families.py)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import EXAMPLES, ROOT

from orchestrator.common.objective import Objective
from orchestrator.search import make_searcher
from orchestrator.search.families import MODEL_ERROR, family, family_left_to_measure
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for


def test_the_error_is_the_validation_reports():
    report = json.loads((ROOT / "docs" / "validation.json").read_text())
    assert MODEL_ERROR == report["within_landscape"]["p90_abs"]


def test_an_untouched_family_within_the_error_is_left_to_measure():
    measured = Layout(tp=2, pp=4, dp=8)
    same_family = Layout(tp=2, pp=4, dp=8, micro_batch_size=2)
    near, far = Layout(tp=4, pp=2, dp=8), Layout(tp=8, pp=1, dp=8)
    bar = 100.0
    just_inside = bar * math.exp(-MODEL_ERROR) * 1.01
    assert family_left_to_measure([same_family, near, far], [bar, just_inside, 50.0],
                                  [measured], bar) == near
    assert family_left_to_measure([same_family, far], [bar, 50.0], [measured], bar) is None


def _stopped_campaign(seed: int):
    """cost-guided on frontier-1t, the model the truth up to 2% noise, run to its own stop."""
    spec = load_spec(EXAMPLES / "frontier-1t.yaml")
    cost = cost_model_for(spec)
    configs = [c for c in spec.search_space().candidates() if cost.estimate(c).fits]
    from orchestrator.backends.simulated import SimulatedBackend

    sim = SimulatedBackend(cost, noise=0.02, seed=seed)
    searcher = make_searcher("cost-guided", configs, Objective(), seed=seed, cost_model=cost)
    for trial in range(200):
        proposed = [c for c in (searcher.repeat(),) if c is not None] or searcher.ask(1)
        if not proposed:
            return searcher, cost, configs
        searcher.tell(proposed[0], sim.run(proposed[0], f"t{trial}"))
    raise AssertionError("the search never stopped")


def _best_measured(searcher) -> float:
    """The bar the rule holds a family to: the best throughput the search measured (its
    noise included), as the searcher's own best estimate is, not the model's prediction."""
    return max(r.tokens_per_s for _, _, r in searcher.history if r.ok)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_stopped_search_has_measured_every_family_that_could_still_win(seed):
    searcher, cost, configs = _stopped_campaign(seed)
    assert searcher.stop_reason and "family" in searcher.stop_reason
    ran = {c for _, c, r in searcher.history if r.ok}
    best = _best_measured(searcher)
    best_of_family: dict = {}
    for c in configs:
        best_of_family[family(c)] = max(best_of_family.get(family(c), 0.0),
                                        cost.estimate(c).tokens_per_s)
    could_win = {f for f, tokens in best_of_family.items()
                 if tokens * math.exp(MODEL_ERROR) >= best}
    assert could_win <= {family(c) for c in ran}, sorted(could_win - {family(c) for c in ran})


def test_without_the_rule_a_search_stops_with_such_families_unmeasured(monkeypatch):
    """The rule is what measures them: turned off, seed 3 stops with one left (the residual
    model's bound had narrowed below the model's measured error), which the rule measures."""
    monkeypatch.setattr("orchestrator.search.cost_guided.family_left_to_measure",
                        lambda *args: None)
    searcher, cost, configs = _stopped_campaign(3)
    ran = {c for _, c, r in searcher.history if r.ok}
    best = _best_measured(searcher)
    left = {family(c) for c in configs
            if cost.estimate(c).tokens_per_s * math.exp(MODEL_ERROR) >= best} - \
        {family(c) for c in ran}
    assert left
