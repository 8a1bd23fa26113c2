"""Repeats priced in GPU-hours: `search.max_repeats` caps how often one layout is measured, and
a 1,024-GPU campaign warm-started from a 128-GPU one spends no more GPU-hours than cold."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import EXAMPLES

from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for


def _campaign(runs, name, *sets):
    from orchestrator.record.budget import executed, gpu_hours
    from orchestrator.record.campaign import CampaignView
    from orchestrator.scheduling.controller import Controller

    spec = load_spec(EXAMPLES / "frontier-175b.yaml", [
        f"name={name}", f"tracking.runs_dir={runs}", "tracking.enabled=false",
        "backend.noise=0.05", "backend.seed=2", "search.algorithm=cost-guided",
        "search.seed=2", *sets])
    Controller(spec).run()
    ran = executed(CampaignView.open(runs, name).records())
    return sum(gpu_hours(r) for r in ran), max(Counter(r.config for r in ran).values())


def test_a_warm_start_spends_no_more_gpu_hours_than_a_cold_start(tmp_path):
    """Before: cold 11 trials, 1,718 GPU-hours; warm 33 trials, 4,845 GPU-hours, two layouts
    within noise of each other measured 12 and 11 times."""
    runs = tmp_path / "runs"
    _campaign(runs, "source", "scale.nodes=16", "scale.global_batch_size=192",
              "budget.max_trials=20")
    cold, _ = _campaign(runs, "cold", "budget.max_trials=50")
    warm, most = _campaign(runs, "warm", "budget.max_trials=50", "search.warm_start=source")
    cap = load_spec(EXAMPLES / "frontier-175b.yaml").search.max_repeats
    assert warm <= cold, (warm, cold)
    assert most <= cap


def _measured(cap: int, seed: int) -> Counter:
    """How often each layout is measured in a 40-trial noisy campaign of cost-guided."""
    from orchestrator.common.objective import Objective
    from orchestrator.search import make_searcher

    spec = load_spec(EXAMPLES / "frontier-175b.yaml")
    cost = cost_model_for(spec)
    configs = [c for c in spec.search_space().candidates() if cost.estimate(c).fits]
    sim = SimulatedBackend(cost, noise=0.05, seed=seed, interactions=1.0)
    searcher = make_searcher("cost-guided", configs, Objective(), seed=seed, cost_model=cost,
                             max_repeats=cap)
    counts: Counter = Counter()
    while sum(counts.values()) < 40:
        repeat = searcher.repeat(trials_left=40 - sum(counts.values()))
        proposed = [repeat] if repeat is not None else searcher.ask(1)
        if not proposed:
            break
        counts[proposed[0]] += 1
        searcher.tell(proposed[0], sim.run(proposed[0], f"t{sum(counts.values())}"))
    return counts


def test_max_repeats_caps_the_measurements_of_one_layout(monkeypatch):
    """With repeats always worth their GPU-hours (an endless production run), a layout is
    measured more than 3 times under a cap of 12, and never more than 3 under a cap of 3."""
    import orchestrator.search.repeats as repeats

    monkeypatch.setattr(repeats, "PRODUCTION_HOURS", float("inf"))
    assert max(_measured(12, seed=0).values()) > 3
    for seed in range(3):
        assert max(_measured(3, seed=seed).values()) <= 3


@pytest.mark.parametrize("sets,fragment", [
    (["search.algorithm=cost-guided", "search.max_repeats=0"], "search.max_repeats"),
    (["search.algorithm=random", "search.max_repeats=4"], "search.max_repeats: only the cost-guided"),
])
def test_a_bad_max_repeats_is_one_line_naming_the_key(runs_dir, cli, sets, fragment):
    args = [a for s in sets for a in ("--set", s)]
    code, _, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), *args)
    assert code == 2 and fragment in err and err.strip().count("\n") == 0, err
