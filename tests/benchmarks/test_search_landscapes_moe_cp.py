"""The search benchmark's mixture-of-experts and long-context landscapes: each builds from a
published example spec, searches expert (ep) or context (cp) parallelism, and its best layout
under the noise-free simulated backend uses it; the perturbed and quirked variants hide a
ground truth that differs from the model the searchers see."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from landscapes_moe_cp import (  # noqa: E402
    LONG_CONTEXT_LANDSCAPES,
    MOE_LANDSCAPES,
    PARALLEL_QUIRKS,
)
from search_efficiency import LANDSCAPES, landscape, perturbed_only  # noqa: E402

from orchestrator.backends.simulated import SimulatedBackend  # noqa: E402
from orchestrator.campaign_spec import load_spec  # noqa: E402
from orchestrator.campaign_spec.planning import cost_model_for  # noqa: E402

KNOB = {**{name: "ep" for name in MOE_LANDSCAPES},
        **{name: "cp" for name in LONG_CONTEXT_LANDSCAPES}}
PLAIN = [name for name in KNOB if LANDSCAPES[name][2:] == (0.0, 0.0)
         and not set(PARALLEL_QUIRKS) & set(LANDSCAPES[name][1])]
HIDDEN = [name for name in KNOB if name not in PLAIN]


def test_both_families_have_a_plain_and_a_hidden_truth_landscape():
    for family in (MOE_LANDSCAPES, LONG_CONTEXT_LANDSCAPES):
        assert set(family) <= set(LANDSCAPES)
        assert {name in PLAIN for name in family} == {True, False}


@pytest.mark.parametrize("name", PLAIN)
def test_the_best_layout_uses_the_searched_parallelism(name):
    candidates, _, sim, truth = landscape(name, seed=0, noise=0.0)
    knob = KNOB[name]
    assert 100 <= len(candidates) <= 5000, "a space the searchers can be compared on"
    searched = {getattr(c, knob) for c in truth}
    assert len(searched) >= 3 and max(searched) > 1, f"{knob} is searched among layouts that fit"
    best = max(truth, key=truth.get)
    assert getattr(best, knob) > 1
    result = sim.run(best, "t1")
    assert result.ok and result.tokens_per_s == pytest.approx(truth[best])


@pytest.mark.parametrize("name", HIDDEN)
def test_a_hidden_truth_differs_from_the_model(name):
    path, overrides, perturbation, interactions = LANDSCAPES[name]
    drawn = [o for o in overrides if o not in PARALLEL_QUIRKS]
    plain = next(p for p in PLAIN if LANDSCAPES[p][:2] == (path, drawn))
    assert KNOB[plain] == KNOB[name]
    spec = load_spec(ROOT / path, overrides)
    candidates = spec.search_space().candidates()[::25]
    sim = SimulatedBackend(cost_model_for(spec), noise=0.0, perturbation=perturbation,
                           interactions=interactions, seed=0,
                           parallel_quirks=spec.backend.parallel_quirks)
    factors = [sim.truth_factor(c.to_params()) for c in candidates]
    assert max(factors) / min(factors) > 1.1


def test_the_generative_prior_reference_knows_only_the_perturbed_knobs():
    """The benchmark's floor searcher learns effects on the simulator's perturbed knobs only,
    so a measurement says as much of every ep and etp as of the one it measured."""
    from generative_prior import generative_prior_searcher

    from orchestrator.common.objective import Objective
    from orchestrator.result import TrialResult
    from orchestrator.search.encoding import knob_values

    candidates, cost, sim, truth = landscape("mixtral-8x22b-perturbed", 0)
    searcher = generative_prior_searcher(0.2, 0.0, candidates, Objective(), seed=0,
                                         cost_model=cost)
    measured = None
    while measured is None:  # a risky layout is proposed too; the benchmark prunes it
        (asked,) = searcher.ask(1)
        if asked in truth:
            measured = asked
        else:
            searcher.tell(asked, TrialResult(status="infeasible"))
    searcher.tell(measured, sim.run(measured, "t1"))
    i = searcher._index[measured]

    def rest(config):
        return {k: v for k, v in knob_values(config).items() if k not in ("ep", "etp")}

    twins = [j for j, c in enumerate(searcher.candidates)
             if c.ep != measured.ep and rest(c) == rest(measured)]
    model = searcher._residuals
    assert model.std[i] < 0.1 * model.std.max()
    assert twins and all(abs(model.mean[j] - model.mean[i]) < 1e-9 for j in twins)
    with pytest.raises(ValueError, match="no quirks"):
        generative_prior_searcher(0.0, 1.0, candidates, Objective(), seed=0, cost_model=cost)
    # The benchmark runs it only where it applies.
    assert [name for name in KNOB if perturbed_only(name)] == [
        "mixtral-8x22b-perturbed", "llama3-405b-32k-perturbed"]
    assert not perturbed_only("cpu-tiny-grid")


@pytest.mark.parametrize("name", [n for n in HIDDEN if set(PARALLEL_QUIRKS) & set(LANDSCAPES[n][1])])
def test_parallel_quirks_move_the_searched_knob_itself(name):
    """Layouts that differ only in the searched knob (ep or cp) get different hidden factors,
    so the model's own ep/cp effect is not the truth there."""
    _, _, sim, truth = landscape(name, seed=0, noise=0.0)
    knob = KNOB[name]
    by_rest: dict = {}
    for config in truth:
        rest = {k: v for k, v in config.to_params().items() if k not in (knob, "dp", "grad_accum_steps")}
        by_rest.setdefault(repr(sorted(rest.items())), set()).add(
            round(sim.truth_factor(config.to_params()), 6))
    assert any(len(factors) > 1 for factors in by_rest.values())
