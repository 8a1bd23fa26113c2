"""The Ray backend against a real local Ray runtime (num_cpus=2) started by the test."""

from __future__ import annotations

import tempfile
import time

import pytest
from conftest import builtin_request, journal_events, write_spec
from test_failures_and_external import TINY, processes_naming

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_runtime():
    from orchestrator.backends.ray import RayBackend

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    backend = RayBackend(num_cpus=2, temp_dir=temp)
    yield backend
    backend.shutdown()  # stops the processes this runtime started, and only those


@pytest.mark.slow
def test_campaign_on_ray_runs_real_trials(tmp_path, runs_dir, cli, ray_runtime):
    spec = write_spec(tmp_path / "ray.yaml", name="on-ray", backend={"kind": "ray"},
                      search={"algorithm": "grid"}, budget={"max_trials": 2, "max_concurrent": 1},
                      space={"zero_stage": [0, 3], "micro_batch_size": [4],
                             "activation_checkpointing": ["none"]},
                      trial={"steps": 2, "warmup_steps": 1, "timeout_s": 120})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    finished = [e for e in journal_events(runs_dir / "on-ray") if e["event"] == "finished"]
    assert [e["result"]["status"] for e in finished] == ["ok", "ok"]
    submitted = [e for e in journal_events(runs_dir / "on-ray") if e["event"] == "submitted"]
    assert all("ray_actor" in e["handle"] for e in submitted)


@pytest.mark.slow
def test_cancelled_ray_task_kills_its_trial(tmp_path, ray_runtime):
    request = builtin_request(
        tmp_path / "hang", "hang", {"model": TINY, "dp": 2, "micro_batch_size": 2,
                                    "grad_accum_steps": 2, "steps": 2, "warmup_steps": 1},
        timeout_s=300, env={"PARATUNE_INJECT_FAULT": "hang", "OMP_NUM_THREADS": "1"},
    )
    handle = ray_runtime.submit(request)
    deadline = time.time() + 90
    while time.time() < deadline and not (tmp_path / "hang" / "trial.log").exists():
        time.sleep(0.2)
    time.sleep(8)  # the ranks are up and hanging
    assert processes_naming(str(tmp_path / "hang"))
    handle.cancel()
    deadline = time.time() + 30
    while time.time() < deadline and processes_naming(str(tmp_path / "hang")):
        time.sleep(0.5)
    assert not processes_naming(str(tmp_path / "hang")), "the cancelled trial left ranks behind"
    result = None
    while result is None and time.time() < deadline + 30:
        result = handle.poll()
        time.sleep(0.2)
    assert result is not None and result.status == "failed"


def test_local_ranks_count_the_ranks_on_each_node():
    from orchestrator.backends.ray_runner import local_ranks

    assert local_ranks(["a", "b"], 2, 4) == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert local_ranks(["a", "a"], 2, 4) == [(0, 4), (1, 4), (2, 4), (3, 4)]  # one node, both bundles
    assert local_ranks(["a", "b"], 2, 3) == [(0, 2), (1, 2), (0, 1)]


@pytest.mark.slow
def test_a_running_trial_actor_is_reattached_by_name_and_cancelled(tmp_path, ray_runtime):
    """What a resumed controller does: the journaled name finds the trial's actor, whose
    handle polls and cancels like the first; a journal of an earlier release (`ray_task`)
    finds nothing, and a cancelled trial's actor is gone."""
    request = builtin_request(
        tmp_path / "hang", "hang", {"model": TINY, "dp": 2, "micro_batch_size": 2,
                                    "grad_accum_steps": 2, "steps": 2, "warmup_steps": 1},
        timeout_s=300, env={"PARATUNE_INJECT_FAULT": "hang", "OMP_NUM_THREADS": "1"},
    )
    first = ray_runtime.submit(request)
    info = first.info()
    assert info == {"ray_actor": first.name, "ray_namespace": "paratune"}
    deadline = time.time() + 90
    while time.time() < deadline and not processes_naming(str(tmp_path / "hang")):
        time.sleep(0.2)
    assert ray_runtime.reattach({"ray_task": "00ff"}, request) is None
    again = ray_runtime.reattach(info, request)
    assert again is not None and again.poll() is None and again.info() == info
    again.cancel()
    assert not processes_naming(str(tmp_path / "hang")), "the cancelled trial left ranks behind"
    assert ray_runtime.reattach(info, request) is None
