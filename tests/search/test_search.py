"""Searcher adapters, stop criteria, multi-fidelity and warm start, on simulated landscapes."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import EXAMPLES, journal_events

from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search import make_searcher
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for

ADAPTERS = ["grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided"]


@pytest.fixture(scope="module")
def landscape():
    spec = load_spec(EXAMPLES / "frontier-175b.yaml")
    return spec.search_space().candidates(), cost_model_for(spec)


@pytest.mark.parametrize("algorithm", ADAPTERS)
def test_adapter_asks_valid_configs_and_takes_failures(landscape, algorithm):
    candidates, cost = landscape
    valid = set(candidates)
    searcher = make_searcher(algorithm, candidates, Objective(), seed=1, cost_model=cost)
    first = searcher.ask(1)
    assert len(first) == 1 and first[0] in valid
    searcher.tell(first[0], TrialResult(status="oom", error="out of memory"))
    asked = [first[0]]
    sim = SimulatedBackend(cost, seed=1)
    for i in range(6):
        proposed = searcher.ask(1)
        if not proposed:
            break
        (config,) = proposed
        assert config in valid and config not in asked  # valid, and never the same twice
        asked.append(config)
        searcher.tell(config, sim.run(config, f"t{i}"))
    assert len(asked) >= 2


def run_frontier(cli, *args):
    code, out, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), *args)
    assert code == 0, err
    return out


def test_patience_and_gpu_hours_stop_a_campaign(runs_dir, cli):
    run_frontier(cli, "--set", "search.algorithm=random", "--set", "budget.patience=3",
                 "--set", "budget.max_trials=30")
    status = json.loads(cli("status", "frontier-175b", "--json")[1])
    budget = status["budget"]
    assert budget["exhausted"].startswith("no improvement in") and budget["trials"] < 30
    assert 3 <= budget["since_improvement"] < 3 + 4  # trials already in flight (4 at once) end too

    # Each trial reserves twice its predicted simulated time on 1,024 GPUs before it starts:
    # the campaign stops within its GPU-hours, on a trial that no longer fits.
    run_frontier(cli, "--set", "name=gpuh", "--set", "search.algorithm=random",
                 "--set", "budget.gpu_hours=1500")
    status = json.loads(cli("status", "gpuh", "--json")[1])
    budget = status["budget"]
    assert status["stop_reason"].startswith("budget.gpu_hours: "), status["stop_reason"]
    assert 0 < budget["gpu_hours"] <= 1500 and budget["trials"] < 30, budget
    assert budget["gpu_hours_left"] == 1500 - budget["gpu_hours"]


def test_a_simulated_hang_holds_its_devices_until_the_timeout(runs_dir, cli):
    """So that a gpu_hours budget can be rehearsed with failures on the simulated backend."""
    run_frontier(cli, "--set", "name=hangs", "--set", "backend.failure_rate=1.0",
                 "--set", "budget.max_trials=9", "--set", "trial.timeout_s=600")
    ended = [e for e in journal_events(runs_dir / "hangs") if e["event"] == "finished"]
    hangs = [e for e in ended if e["result"]["status"] == "timeout"]
    assert hangs, [e["result"]["status"] for e in ended]
    held = sum(e["result"]["world_size"] * 600 / 3600 for e in hangs)
    status = json.loads(cli("status", "hangs", "--json")[1])
    assert held <= status["budget"]["gpu_hours"] < held + 1


def test_wall_clock_budget(runs_dir, cli):
    run_frontier(cli, "--set", "name=clock", "--set", "budget.wall_clock_s=0.001")
    status = json.loads(cli("status", "clock", "--json")[1])
    assert status["budget"]["exhausted"].startswith("wall clock") and status["budget"]["trials"] <= 1


def test_successive_halving_keeps_fidelities_apart(runs_dir, cli):
    code, out, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), "--set", "name=halving",
                         "--set", "search.algorithm=random", "--set", "search.fidelity="
                         "{screening_steps: 2, keep_fraction: 0.25, min_screened: 4}",
                         "--set", "budget.max_trials=12")
    assert code == 0, err
    finished = [e for e in journal_events(runs_dir / "halving") if e["event"] == "finished"
                and e["result"]["status"] != "infeasible"]
    screens = [e for e in finished if e["fidelity"] == "screen"]
    fulls = [e for e in finished if e["fidelity"] == "full"]
    # The whole budget, or all of it but the last trial, which a screen could not be confirmed in.
    held_back = "1 trial(s) left, kept to confirm the screens" in " ".join((out + err).split())
    assert screens and fulls and len(screens) + len(fulls) == 12 - held_back
    screened_configs = [json.dumps(e["config"], sort_keys=True) for e in screens]
    for e in fulls:  # every full trial re-measures a screened config
        assert json.dumps(e["config"], sort_keys=True) in screened_configs
    assert all(len(e["result"]["step_times_s"]) == 2 for e in screens if e["result"]["status"] == "ok")
    best = json.loads(cli("best", "halving", "--json")[1])
    assert best["trial_id"] in {e["trial_id"] for e in fulls}

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("paratune/halving")
    runs = client.search_runs([exp.experiment_id], filter_string="params.fidelity = 'full'")
    assert len(runs) == len(fulls)


@pytest.mark.parametrize("algorithm", ["random", "optuna"])
def test_the_last_trials_confirm_the_screens_rather_than_screen_more(tmp_path, runs_dir, cli,
                                                                      algorithm):
    """Three trials at once: a screen starts only while a trial is left to confirm it and
    each screen still running, so no screen in the top share ends unconfirmed (on this
    landscape both searchers left one or two before)."""
    from orchestrator.record.campaign import CampaignView
    from orchestrator.scheduling.halving import promotions

    name = f"reserve-{algorithm}"
    path = tmp_path / "screens.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "model": "llama-7b", "cluster": "a100-80g",
        "scale": {"nodes": 2, "gpus_per_node": 8, "global_batch_size": 64},
        "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "zero_stage": [0, 1, 2, 3],
                  "micro_batch_size": [1, 2, 4],
                  "activation_checkpointing": ["none", "selective", "full"]},
        "search": {"algorithm": algorithm, "seed": 0, "fidelity": {
            "screening_steps": 2, "keep_fraction": 0.25, "min_screened": 4}},
        "budget": {"max_trials": 12, "max_concurrent": 3},
        "backend": {"kind": "simulated", "noise": 0.03, "interactions": 0.5,
                    "perturbation": 0.2},
        "tracking": {"enabled": False}}))
    code, _, err = cli("run", str(path))
    assert code == 0, err
    view = CampaignView.open(runs_dir, name)
    assert promotions(view.records(), view.spec.search.fidelity, view.objective) == []
    best = json.loads(cli("best", name, "--json")[1])
    assert view.summary().best.phase == "confirm" and best["trial_id"] == view.best().trial_id


def test_warm_start_reads_the_journal_not_its_mirror(runs_dir, cli):
    """The source's MLflow store is gone: its journal, the record, still seeds the campaign,
    with the trials that ran in full (no pruned layout, no screen)."""
    import shutil

    from orchestrator.record.campaign import CampaignView
    from orchestrator.scheduling.warm_start import source_results

    run_frontier(
        cli, "--set", "name=source", "--set", "search.algorithm=random",
        "--set", "budget.max_trials=16",
        "--set", "search.fidelity={screening_steps: 2, keep_fraction: 0.5, min_screened: 2}")
    (runs_dir / "mlflow.db").unlink()
    shutil.rmtree(runs_dir / "mlartifacts", ignore_errors=True)
    view = CampaignView.open(runs_dir, "source")
    found = source_results(view)
    ran = [r for r in view.records() if r.result and r.result.status != "infeasible"]
    assert {t for t, _, _ in found} == {r.trial_id for r in ran if r.phase == "confirm"}
    assert len(found) >= 3 and len(ran) > len(found)
    run_frontier(cli, "--set", "name=seeded-from-journal", "--set", "search.algorithm=cost-guided",
                 "--set", "search.warm_start=source", "--set", "budget.max_trials=3")


def test_warm_start_measures_the_best_among_its_first_three_trials(runs_dir, cli):
    """The landscape hides ±20% factors per knob value from the model. A campaign of the same
    model at half the scale, run first, teaches the cost-guided searcher those residuals and the
    calibration; seeded with it, the new campaign finds its best within 3 trials."""
    hidden = ["--set", "backend.perturbation=0.2", "--set", "backend.seed=7",
              "--set", "search.algorithm=cost-guided"]
    run_frontier(cli, "--set", "name=source", "--set", "scale.nodes=64",
                 "--set", "scale.global_batch_size=768", "--set", "search.algorithm=random",
                 "--set", "budget.max_trials=25", *hidden[:4])
    run_frontier(cli, "--set", "name=seeded", "--set", "search.warm_start=source",
                 "--set", "budget.max_trials=3", *hidden)

    spec = load_spec(EXAMPLES / "frontier-175b.yaml", ["backend.perturbation=0.2", "backend.seed=7"])
    cost = cost_model_for(spec)
    truth = SimulatedBackend(cost, perturbation=0.2, seed=7)
    values = {c: cost.estimate(c).tokens_per_s * truth.truth_factor(c.to_params())
              for c in spec.search_space().candidates() if cost.estimate(c).fits}
    best_config = max(values, key=values.get)
    measured = [e["config"] for e in journal_events(runs_dir / "seeded")
                if e["event"] == "finished" and e["result"]["status"] == "ok"]
    assert best_config.to_dict() in measured[:3]


def test_run_takes_runs_dir_as_resume_and_status_do(tmp_path, cli, monkeypatch):
    monkeypatch.delenv("PARATUNE_RUNS_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    here = tmp_path / "elsewhere"
    code, out, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), "--runs-dir", str(here),
                         "--set", "budget.max_trials=2")
    assert code == 0, err
    assert (here / "frontier-175b" / "journal.jsonl").is_file() and not (tmp_path / "runs").exists()
    # The export hint finds it again (its lines continue with a backslash where too wide).
    assert f"--runs-dir {here} -o launch.sh" in " ".join(out.replace("\\\n", "").split())
    assert json.loads(cli("status", "frontier-175b", "--runs-dir", str(here), "--json")[1])
    monkeypatch.setenv("PARATUNE_RUNS_DIR", str(tmp_path / "other"))
    code, _, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), "--runs-dir", str(here))
    assert code == 2 and err.startswith(f"error: --runs-dir {here}: $PARATUNE_RUNS_DIR=")
