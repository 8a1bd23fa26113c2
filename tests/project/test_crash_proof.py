"""A controller that survives what a supercomputer does to it: a second controller, SIGKILL at
random points, failing trials, and an MLflow server that goes away and comes back."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, alive_naming, journal_events, run_cli_process, write_spec

from orchestrator.common.processes import is_running, kill_tree

SPACE = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "zero_stage": [0, 1, 2, 3],
         "micro_batch_size": [1, 2, 4, 8], "activation_checkpointing": ["none", "selective", "full"]}


def simulated_spec(path: Path, name: str, trials: int, **backend) -> Path:
    spec = {
        "name": name, "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 64, "global_batch_size": 2048}, "space": SPACE,
        "search": {"algorithm": "random", "seed": 3},
        "budget": {"max_trials": trials, "max_concurrent": 4},
        "backend": {"kind": "simulated", "seed": 5, **backend},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def start_controller(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_second_controller_is_refused_with_the_holders_pid(tmp_path, runs_dir):
    spec = simulated_spec(tmp_path / "s.yaml", "locked", 40, latency_s=2.0)
    env = {"PARATUNE_RUNS_DIR": str(runs_dir)}
    first = start_controller("run", str(spec), env=env)
    campaign = runs_dir / "locked"
    deadline = time.time() + 120  # its lock held and its spec saved: the journal follows both
    while time.time() < deadline and not (
            (campaign / "journal.jsonl").exists() and journal_events(campaign)):
        time.sleep(0.1)
    # Stopped, the first controller holds its lock however long the second takes to start.
    first.send_signal(signal.SIGSTOP)
    second = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "locked"],
                            cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert second.returncode == 2
    assert f"PID {first.pid}" in second.stderr and socket.gethostname() in second.stderr
    assert second.stderr.count("\n") == 1
    # The kernel dropped the dead holder's lock: resume may go on.
    resumed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "locked"],
                             cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]


@pytest.mark.slow
def test_fault_injection_with_five_controller_kills(tmp_path, runs_dir, capsys):
    """110 trials, 20% of them crash, hang or run out of memory; the controller is SIGKILLed at
    5 random points and resumed each time. Every trial ends exactly once, nothing is lost, and
    MLflow's child runs match the journal one to one."""
    trials = 110
    spec = simulated_spec(tmp_path / "s.yaml", "faults", trials, failure_rate=0.2, latency_s=0.05)
    env = {"PARATUNE_RUNS_DIR": str(runs_dir)}
    campaign = runs_dir / "faults"
    rng = random.Random(11)
    kills = 0
    process = start_controller("run", str(spec), env=env)
    for _ in range(5):
        before = len(journal_events(campaign)) if (campaign / "journal.jsonl").exists() else 0
        deadline = time.time() + 120
        while time.time() < deadline and process.poll() is None:
            now = len(journal_events(campaign)) if (campaign / "journal.jsonl").exists() else 0
            if now >= before + 8:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))
        if process.poll() is not None:
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
        process = start_controller("resume", "faults", env=env)
    assert process.wait(timeout=300) == 0, process.stderr.read()[-3000:]

    events = journal_events(campaign)
    finished = [e for e in events if e["event"] == "finished"]
    ids = [e["trial_id"] for e in finished]
    duplicated = len(ids) - len(set(ids))
    configs = collections.Counter(json.dumps(e["config"], sort_keys=True) for e in finished)
    executed = [e for e in finished if e["result"]["status"] != "infeasible"]
    submitted = {e["trial_id"] for e in events if e["event"] == "submitted"}
    lost = len(submitted - set(ids))
    faults = sum(e["result"]["status"] in ("failed", "timeout", "oom") for e in executed)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("paratune/faults")
    runs = client.search_runs([experiment.experiment_id],
                              filter_string="tags.`paratune.kind` = 'trial'", max_results=5000)
    mlflow_ids = [r.data.tags["paratune.trial_id"] for r in runs]
    with capsys.disabled():
        print(f"\nfault injection: {len(executed)} trials, {faults} faults injected, {kills} kills, "
              f"lost {lost}, duplicated {duplicated}, MLflow runs {len(mlflow_ids)} for "
              f"{len(executed)} journal trials that ran ({len(ids) - len(executed)} pruned)")
    assert kills == 5
    assert duplicated == 0 and lost == 0 and max(configs.values()) == 1
    assert len(executed) == trials
    assert 0.1 * trials < faults < 0.3 * trials
    # one run per trial that ran, no duplicates; pruned layouts never ran and get no run
    assert sorted(mlflow_ids) == sorted(e["trial_id"] for e in executed)
    assert all(r.info.status in ("FINISHED", "FAILED") for r in runs)


@pytest.mark.slow
def test_resume_reattaches_a_local_trial_that_outlived_its_controller(tmp_path, runs_dir):
    """SIGKILL the controller while a torchrun trial runs: the trial goes on, and `resume`
    takes it over (no second submission) and records its result; nothing is left running."""
    spec = write_spec(tmp_path / "c.yaml", name="orphan", search={"algorithm": "grid"},
                      space={"zero_stage": [0], "micro_batch_size": [4],
                             "activation_checkpointing": ["none"]},
                      budget={"max_trials": 1}, tracking={"enabled": False},
                      trial={"steps": 40, "warmup_steps": 1, "timeout_s": 300})
    campaign, env = runs_dir / "orphan", {"PARATUNE_RUNS_DIR": str(runs_dir)}
    folder = campaign / "trials" / "t0001"
    controller = start_controller("run", str(spec), env=env)
    handle: dict = {}
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(alive_naming(folder)) < 3:  # torchrun + 2 ranks
            time.sleep(0.2)
        controller.send_signal(signal.SIGKILL)
        controller.wait()
        events = journal_events(campaign)
        handle = next(e["handle"] for e in events if e["event"] == "submitted")
        assert is_running(handle["pid"], handle["start_time"]), "the trial outlives its controller"
        assert len(alive_naming(folder)) >= 3
        assert not any(e["event"] == "finished" for e in events)

        resumed = run_cli_process("resume", "orphan", env=env, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        if handle and is_running(handle["pid"], handle["start_time"]):
            kill_tree(handle["pid"])
    events = [e for e in journal_events(campaign) if e.get("trial_id") == "t0001"]
    assert [e["event"] for e in events] == ["submitted", "reattached", "finished"]
    assert events[1]["handle"] == handle
    result = events[2]["result"]
    assert result["status"] == "ok" and result["tokens_per_s"] > 0
    assert len(result["step_times_s"]) == 40
    assert not alive_naming(folder), "no process of the trial is left"
