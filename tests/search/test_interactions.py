"""Landscapes whose truth depends on several knobs at once, and the cost-guided searcher on them."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
import yaml
from conftest import EXAMPLES, journal_events

from orchestrator.backends import parallel_quirks, quirks
from orchestrator.backends.parallel_quirks import HiddenParameters
from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.search.encoding import KnobSpace, knob_values
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for


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


def test_parallel_quirks_are_thresholds_and_interactions_of_the_knobs_they_name():
    base = {"tp": 2, "pp": 8, "dp": 64, "cp": 1, "ep": 1, "virtual_stages": 1,
            "grad_accum_steps": 8, "activation_checkpointing": "selective"}
    hidden = HiddenParameters.draw(0)

    def quirk(name, **changed):
        return float(getattr(parallel_quirks, name)(hidden, dict(base, **changed)))

    assert all(float(getattr(parallel_quirks, q)(HiddenParameters.draw(s), base)) == 0.0
               for q in parallel_quirks.PARALLEL_QUIRKS for s in range(20))  # no quirk
    # the expert all-to-all: free up to a span, then slower per doubling and on larger clusters
    dispatch = [quirk("expert_dispatch", ep=ep) for ep in (2, 4, 8, 16, 32, 64)]
    assert dispatch[:3] == [0.0] * 3 and dispatch[-1] < dispatch[-2] < 0
    assert quirk("expert_dispatch", ep=64, dp=512) < quirk("expert_dispatch", ep=64)
    # the context exchange depends on cp, its kind and tp together
    ring = {"cp": 8, "cp_comm_type": "p2p"}
    assert quirk("context_exchange", **ring, tp=1) == 0.0  # cp x tp within a node
    assert quirk("context_exchange", **ring) < 0
    assert quirk("context_exchange", **ring, activation_checkpointing="full") == \
        pytest.approx(math.log(1 - (1 - math.exp(quirk("context_exchange", **ring))) / 2))
    assert quirk("context_exchange", cp=8, cp_comm_type="allgather") < 0
    # interleaving pays its sends back with more micro-batches per replica
    few, many = (quirk("interleave", virtual_stages=4, grad_accum_steps=m) for m in (8, 64))
    assert few < many < 0


def test_the_prior_draws_parameters_as_the_truth_does():
    """A reference search told the structure weighs draws of the same prior: for each
    parameter, the seeds' truths span the range of the prior's draws."""
    prior = HiddenParameters.prior(500, seed=1)
    truths = [HiddenParameters.draw(s) for s in range(200)]
    for name in vars(truths[0]):
        drawn, true = getattr(prior, name), np.array([getattr(t, name) for t in truths])
        spread = drawn.max() - drawn.min()
        assert spread > 0 and abs(true.min() - drawn.min()) < 0.05 * spread, name
        assert abs(true.max() - drawn.max()) < 0.05 * spread, name
    settings = {"tp": 4, "pp": 8, "dp": 64, "cp": 8, "ep": 32, "cp_comm_type": "a2a",
                "virtual_stages": 2, "grad_accum_steps": 8}
    each = parallel_quirks.log_factor(prior, settings)
    assert each.shape == (500,) and len(set(each.round(9))) > 100


def test_parallel_quirks_are_not_a_sum_of_knob_effects():
    spec = load_spec(EXAMPLES / "llama3-405b-128k.yaml",
                     ["space.cp=[1, 2, 4, 8, 16]", "space.tp=[1, 2, 4, 8]",
                      "space.cp_comm_type=[allgather, p2p, a2a]"])
    configs = spec.search_space().candidates()
    sim = SimulatedBackend(cost_model_for(spec), seed=3, parallel_quirks=1.0)
    log_truth = [math.log(sim.truth_factor(c.to_params())) for c in configs]
    assert _additive_misfit(configs, log_truth) > 0.02
    off = SimulatedBackend(cost_model_for(spec), seed=3)
    assert {off.truth_factor(c.to_params()) for c in configs} == {1.0}


# ------------------------------------------------------------------ the residual model


def _grid_model():
    from orchestrator.search.residuals import KnobCodes, ResidualModel

    codes = KnobCodes({"a": [0, 1, 2], "b": [0, 1, 2]})
    points = [{"a": a, "b": b} for a in range(3) for b in range(3)]
    encoded = np.array([codes.encode(p) for p in points])
    return ResidualModel(codes, encoded), encoded, points


def test_residual_model_learns_an_effect_of_one_pair_of_knob_values():
    model, encoded, points = _grid_model()
    truth = np.array([0.3 if p == {"a": 0, "b": 0} else 0.0 for p in points])
    model.fit(np.concatenate([encoded, encoded]), np.concatenate([truth, truth]), 0.01)
    # A sum of one effect per knob value would put 0.3·4/9 at (0, 0) and spill onto (0, 1).
    assert model.mean[0] == pytest.approx(0.3, abs=0.05)
    assert abs(model.mean[1]) < 0.05 and abs(model.mean[4]) < 0.05


def test_an_unseen_pair_keeps_its_uncertainty():
    model, encoded, _ = _grid_model()
    measured = encoded[[1, 3]]  # (0, 1) and (1, 0): both values of (0, 0) seen, not the pair
    model.fit(np.concatenate([measured] * 3), np.zeros(6), 0.02)
    assert model.std[0] > 2 * model.std[1]  # (0, 0) is uncertain where (0, 1) is measured
    assert model.std[8] > model.std[0]  # (2, 2): neither value seen either


def test_knobs_outside_the_effect_columns_carry_no_effect():
    from orchestrator.search.residuals import ResidualModel

    class OnlyA(ResidualModel):
        effect_columns = [0]

    model, encoded, points = _grid_model()
    only_a = OnlyA(model.codes, encoded)
    measured = encoded[[0, 0]]  # (0, 0) twice, 0.2 above the model
    for m in (model, only_a):
        m.fit(measured, np.array([0.2, 0.2]), 0.01)
    same_a = [i for i, p in enumerate(points) if p["a"] == 0]
    # Told only a matters, (0, 1) and (0, 2) inherit (0, 0)'s residual and its certainty;
    # with both knobs they share half of it.
    assert np.allclose(only_a.mean[same_a], only_a.mean[0])
    assert np.allclose(only_a.std[same_a], only_a.std[0])
    assert model.mean[1] < 0.8 * model.mean[0] and model.std[1] > 2 * model.std[0]


def test_noise_is_estimated_from_repeats():
    from orchestrator.search.repeats import NOISE_PRIOR, estimate_noise

    assert estimate_noise({"a": [0.0]}).std == pytest.approx(NOISE_PRIOR)
    spread = {i: [0.1, -0.1] for i in range(40)}  # std 0.14 within each pair of repeats
    assert estimate_noise(spread).std == pytest.approx(0.141, abs=0.01)


# ------------------------------------------------------------------ the searcher


def search(candidates, cost, sim, truth, *, seed: int, limit: int = 40):
    """Run cost-guided like the benchmark: repeats first, then the search; returns the trials
    that reached within 3% of the best (None if never), the search trials run (repeats not
    counted) and the searcher."""
    from orchestrator.common.objective import Objective
    from orchestrator.result import TrialResult
    from orchestrator.search import make_searcher

    best = max(truth.values())
    searcher = make_searcher("cost-guided", candidates, Objective(), seed=seed, cost_model=cost)
    trials, repeats, reached = 0, 0, None
    while trials < limit:
        repeat = searcher.repeat()
        proposed = [repeat] if repeat is not None else searcher.ask(1)
        if not proposed:
            break
        repeats += repeat is not None
        (config,) = proposed
        if not cost.estimate(config).fits:
            searcher.tell(config, TrialResult(status="infeasible"))
            continue
        trials += 1
        searcher.tell(config, sim.run(config, f"t{trials}"))
        if reached is None and truth[config] >= 0.97 * best:
            reached = trials
    return reached, trials - repeats, searcher


def true_throughput(candidates, cost, sim):
    """Each fitting layout's throughput on the simulated landscape `sim`, noise aside."""
    return {c: cost.estimate(c).tokens_per_s * sim.truth_factor(c.to_params())
            for c in candidates if cost.estimate(c).fits}


# Seeds 0-11 all run. On 0, 1, 3, 4, 6 and 10 the model's favourite is 11-29% off the best.
# The searcher gets within 3% of the best in at most 10 trials on every seed but 10, where it
# takes 14: the model's three favourites are all 20-32% off, and the optimum's pair (tp 2,
# micro-batch 1) is first measured at trial 14 (31 when κ was 2 from the first trial and
# repeats began at the 12th; 40, never, when repeats took 20 of the 40 trials).
FAR_OFF = {0, 1, 3, 4, 6, 10}
WITHIN = {10: 14}  # trials to within 3% where it is more than 10


@pytest.mark.parametrize("seed", range(12))
def test_cost_guided_recovers_from_interactions_the_model_misses(frontier, seed):
    configs, cost = frontier
    sim = SimulatedBackend(cost, seed=seed, interactions=1.0)
    truth = true_throughput(configs, cost, sim)
    top = max(configs, key=lambda c: cost.estimate(c).tokens_per_s)
    assert (truth[top] < 0.9 * max(truth.values())) == (seed in FAR_OFF)
    reached, trials, _ = search(configs, cost, sim, truth, seed=seed)
    assert reached is not None and reached <= WITHIN.get(seed, 10)
    assert trials >= min(reached, 10)  # search trials, repeats not counted


def test_the_models_favourites_are_measured_after_the_diverse_picks(frontier):
    """Seed 16: the model's favourite measures 22% below the best, which is the model's second;
    the residual model blames the loss on knob values the two share, so the runner-up's bound
    falls with it. The calibrated model's favourite is measured right after the diverse first
    picks, and the runner-up within a few trials of it."""
    from orchestrator.search.cost_guided import DIVERSE_PICKS, VERIFY_TOP

    configs, cost = frontier
    sim = SimulatedBackend(cost, seed=16, interactions=1.0)
    truth = true_throughput(configs, cost, sim)
    ranked = sorted(configs, key=lambda c: -cost.estimate(c).tokens_per_s)
    assert truth[ranked[0]] < 0.8 * truth[ranked[1]] and truth[ranked[1]] == max(truth.values())
    reached, _, searcher = search(configs, cost, sim, truth, seed=16, limit=60)
    assert reached is not None and reached <= 6
    first = [c for _, c, _ in searcher.history][:DIVERSE_PICKS + VERIFY_TOP]
    assert ranked[0] in first and ranked[1] in {c for _, c, _ in searcher.history}


def test_stops_soon_where_the_model_is_right_and_later_where_interactions_hide(frontier):
    """Seeds 0-5: where the model is right the search stops within 13 trials each time (and
    the campaign, its repeats included, well within its budget of 40); with quirks it explores
    longer in most campaigns (on seed 2 it finds the best at its first trial and stops
    sooner), so the median is longer."""
    configs, cost = frontier
    right, wrong = [], []
    for seed in range(6):
        plain = SimulatedBackend(cost, seed=seed)
        _, searched, searcher = search(configs, cost, plain, true_throughput(configs, cost, plain),
                                       seed=seed)
        right.append(searched)
        assert len(searcher.history) <= 20  # repeats priced and capped: no trial budget spent
        quirky = SimulatedBackend(cost, seed=seed, interactions=1.0)
        reached, trials, _ = search(configs, cost, quirky, true_throughput(configs, cost, quirky),
                                    seed=seed)
        assert reached is not None and reached < trials
        wrong.append(trials)
    assert max(right) <= 13 and statistics.median(right) < statistics.median(wrong)


# ------------------------------------------------------------------ repeats in a campaign


def _noisy_spec(runs, name: str, max_trials: int):
    from orchestrator.campaign_spec import spec_from_dict

    data = yaml.safe_load((EXAMPLES / "frontier-175b.yaml").read_text())
    data.update(name=name, search={"algorithm": "cost-guided", "seed": 0},
                budget={"max_trials": max_trials, "max_concurrent": 1},
                backend={"kind": "simulated", "noise": 0.05, "interactions": 1.0, "seed": 1},
                tracking={"enabled": False, "runs_dir": str(runs)})
    return spec_from_dict(data)


def _finished_layouts(runs, name):
    return [(e["config"], e["fidelity"]) for e in journal_events(runs / name)
            if e["event"] == "finished" and e["result"]["status"] != "infeasible"]


def test_close_contenders_are_measured_again_and_a_resume_repeats_the_same(tmp_path):
    from orchestrator.record.campaign import CampaignView
    from orchestrator.scheduling.controller import Controller
    from orchestrator.search.repeats import MAX_REPEATS
    from orchestrator.campaign_spec import load_campaign_spec

    runs = tmp_path / "runs"
    whole = Controller(_noisy_spec(runs, "whole", 40)).run()
    trials = _finished_layouts(runs, "whole")
    repeats = [config for config, fidelity in trials if fidelity == "repeat"]
    assert repeats, "no close contender was measured again"
    searched = [config for config, fidelity in trials if fidelity == "full"]
    assert all(config in searched for config in repeats)  # repeats of measured layouts only
    assert max(repeats.count(c) for c in repeats) < MAX_REPEATS  # the first was no repeat

    # The best is the layout with the best mean over its measurements.
    values: dict[str, list[float]] = {}
    for record in whole.records:
        if record.result is not None and record.result.ok:
            values.setdefault(record.config.key(), []).append(record.result.tokens_per_s)
    means = {key: sum(v) / len(v) for key, v in values.items()}
    assert whole.best.config.key() == max(means, key=means.get)

    # A controller that died halfway through: the journal ends there. Resumed, the campaign
    # runs the same trials, repeats included, in the same phases.
    journal = runs / "whole" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    finished = [i for i, line in enumerate(lines) if json.loads(line)["event"] == "finished"]
    journal.write_text("".join(lines[:finished[len(finished) // 2] + 1]))
    assert len(_finished_layouts(runs, "whole")) < len(trials)
    Controller(load_campaign_spec(runs, "whole")).run(resume=True)
    assert _finished_layouts(runs, "whole") == trials
    assert CampaignView.open(runs, "whole").best().config == whole.best.config


@pytest.mark.parametrize("max_trials", [6, 10])
def test_a_small_budget_explores_before_it_names_a_winner(tmp_path, max_trials):
    """Naming the winner takes at most NAMING_SHARE of the budget: with 6 or 10 trials the
    searcher measures 4 or 7 layouts, not 2 layouts again and again."""
    from orchestrator.scheduling.controller import Controller
    from orchestrator.search.cost_guided import NAMING_SHARE

    runs = tmp_path / "runs"
    Controller(_noisy_spec(runs, "small", max_trials)).run()
    trials = _finished_layouts(runs, "small")
    layouts = {json.dumps(config, sort_keys=True) for config, _ in trials}
    assert len(trials) == max_trials
    assert len(layouts) >= max_trials - int(NAMING_SHARE * max_trials), trials


def test_the_last_trials_of_the_budget_go_to_naming_the_winner(frontier):
    """With few trials left, close contenders are re-measured before the search is over, and
    before the search has run the trials it would wait for otherwise."""
    from orchestrator.common.objective import Objective
    from orchestrator.result import TrialResult
    from orchestrator.search import make_searcher

    configs, cost = frontier
    sim = SimulatedBackend(cost, seed=1, noise=0.05, interactions=1.0)
    searcher = make_searcher("cost-guided", configs, Objective(), seed=0, cost_model=cost)
    for trial in range(5):  # the diverse picks, then the model's next favourites
        (config,) = searcher.ask(1)
        searcher.tell(config, sim.run(config, f"t{trial}"))
    assert searcher._next() is not None  # the search would go on
    assert searcher.repeat(trials_left=100) is None
    assert searcher.repeat(trials_left=3) is None  # 3 of 8: more than NAMING_SHARE
    contender = searcher.repeat(trials_left=2)
    assert contender is not None and contender in [c for _, c, _ in searcher.history]
    searcher.tell(contender, TrialResult(status="ok", tokens_per_s=1.0))


@pytest.mark.parametrize("round_", [2, 4, 6])
def test_a_resume_with_trials_in_flight_runs_what_the_whole_campaign_ran(tmp_path, round_):
    """Three trials at once: the controller dies right after it submitted a round of trials.
    The resumed one runs them again; its searcher heard the finished ones in the order they
    finished and counts the ones in flight as asked, and its budget counts them once, so the
    campaign goes on as it would have. (Killed at another moment, while trials finish, the
    next proposals depend on which ends first, as they would have in a campaign never
    killed.)"""
    from orchestrator.scheduling.controller import Controller
    from orchestrator.campaign_spec import load_campaign_spec, spec_from_dict

    runs = tmp_path / "runs"
    spec = _noisy_spec(runs, "whole", 30)
    data = spec.model_dump(mode="json")
    data["budget"]["max_concurrent"] = 3
    Controller(spec_from_dict(data)).run()
    trials = _finished_layouts(runs, "whole")
    journal = runs / "whole" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    kinds = [json.loads(line)["event"] for line in lines]
    rounds = [i for i in range(len(lines) - 1)
              if kinds[i] == "submitted" and kinds[i + 1] != "submitted"]
    journal.write_text("".join(lines[:rounds[round_] + 1]))
    Controller(load_campaign_spec(runs, "whole")).run(resume=True)
    assert _finished_layouts(runs, "whole") == trials



def test_a_resumed_round_fills_its_free_slot_at_once(tmp_path):
    """Killed while a round of three ends (one finished, two running) with one trial of the
    budget left: the two run again and the last trial starts beside them, since the two
    were counted when first submitted and are not counted again."""
    from orchestrator.scheduling.controller import Controller
    from orchestrator.campaign_spec import load_campaign_spec, spec_from_dict

    runs = tmp_path / "runs"
    data = _noisy_spec(runs, "slots", 10).model_dump(mode="json")
    data["budget"]["max_concurrent"] = 3
    data["search"]["algorithm"] = "random"  # never stops before the budget does
    Controller(spec_from_dict(data)).run()
    journal = runs / "slots" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    events = [json.loads(line) for line in lines]
    submitted = [e["trial_id"] for e in events if e["event"] == "submitted"]
    third_round = submitted[6:9]
    cut = next(i for i, e in enumerate(events)
               if e["event"] == "finished" and e["trial_id"] in third_round)
    journal.write_text("".join(lines[:cut + 1]))
    Controller(load_campaign_spec(runs, "slots")).run(resume=True)
    after = [e for e in journal_events(runs / "slots")[cut + 1:]  # pruned ones never run
             if e["event"] == "submitted"
             or (e["event"] == "finished" and e["result"]["status"] != "infeasible")]
    assert [e["event"] for e in after[:3]] == ["submitted"] * 3, after[:4]
    running = set(third_round) - {events[cut]["trial_id"]}
    assert {e["trial_id"] for e in after[:3]} == {*running, submitted[9]}
