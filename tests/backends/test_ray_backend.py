"""The Ray backend against a real local Ray runtime (num_cpus=2) started by the test."""

from __future__ import annotations

import tempfile
import time

import pytest
import ray  # noqa: F401 - a dependency of the project: a broken install fails these tests
from conftest import builtin_request, journal_events, wait_for_result, write_spec
from test_failures_and_external import TINY, processes_naming, wait_gone


@pytest.fixture(scope="module")
def ray_runtime():
    from orchestrator.backends.ray import RayBackend

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    backend = RayBackend(num_cpus=2, temp_dir=temp)
    yield backend
    backend.shutdown()  # stops the processes this runtime started, and only those


def wait_for(condition, what: str, limit: float = 240):
    """Poll `condition` until it holds (its value); fail after `limit` seconds."""
    deadline = time.monotonic() + limit
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {limit:g}s"
        time.sleep(0.2)
    return value


def hang_request(tmp_path):
    """A trial of two ranks whose rank 0 hangs after its warm-up step."""
    return builtin_request(
        tmp_path / "hang", "hang", {"model": TINY, "dp": 2, "micro_batch_size": 2,
                                    "grad_accum_steps": 2, "steps": 2, "warmup_steps": 1},
        timeout_s=300, env={"PARATUNE_INJECT_FAULT": "hang", "OMP_NUM_THREADS": "1"},
    )


def ranks_up(folder) -> list[int]:
    """torchrun and both ranks of the two-rank trial in `folder`, once all three run."""
    found = processes_naming(str(folder))
    return found if len(found) >= 3 else []


@pytest.mark.slow
def test_campaign_on_ray_runs_real_trials(tmp_path, runs_dir, cli, ray_runtime):
    spec = write_spec(tmp_path / "ray.yaml", name="on-ray", backend={"kind": "ray"},
                      search={"algorithm": "grid"}, budget={"max_trials": 2, "max_concurrent": 1},
                      space={"zero_stage": [0, 3], "micro_batch_size": [4],
                             "activation_checkpointing": ["none"]},
                      trial={"steps": 2, "warmup_steps": 1, "timeout_s": 300})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    finished = [e for e in journal_events(runs_dir / "on-ray") if e["event"] == "finished"]
    assert [e["result"]["status"] for e in finished] == ["ok", "ok"]
    submitted = [e for e in journal_events(runs_dir / "on-ray") if e["event"] == "submitted"]
    assert all("ray_actor" in e["handle"] for e in submitted)


@pytest.mark.slow
def test_cancelled_ray_task_kills_its_trial(tmp_path, ray_runtime):
    request = hang_request(tmp_path)
    handle = ray_runtime.submit(request)
    wait_for(lambda: ranks_up(tmp_path / "hang"), "torchrun and both ranks running")
    handle.cancel()
    assert not wait_gone(str(tmp_path / "hang"), 60), "the cancelled trial left ranks behind"
    result = wait_for_result(handle, 120, "the cancelled trial")
    assert result.status == "failed"


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
    request = hang_request(tmp_path)
    first = ray_runtime.submit(request)
    info = first.info()
    assert info == {"ray_actor": first.name, "ray_namespace": "paratune"}
    wait_for(lambda: ranks_up(tmp_path / "hang"), "torchrun and both ranks running")
    assert ray_runtime.reattach({"ray_task": "00ff"}, request) is None
    again = ray_runtime.reattach(info, request)
    assert again is not None and again.poll() is None and again.info() == info
    again.cancel()
    assert not wait_gone(str(tmp_path / "hang"), 60), "the cancelled trial left ranks behind"
    # ray.kill returns before the actor is gone and its name free: wait for that.
    wait_for(lambda: ray_runtime.reattach(info, request) is None, "the cancelled actor gone", 60)
