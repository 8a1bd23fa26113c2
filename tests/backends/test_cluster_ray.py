"""The Ray backend on a real two-node Ray cluster: a head in namespace node1, a worker in node2
(tests/cluster/start_cluster.sh STATE ray), with token authentication on the cluster's own
token. The backend attaches with `address: auto` (a driver inside node1) and with `ray://`
(from this machine), places a world-size-4 trial with a placement group over both nodes, which
trains to the loss of one process; trials outlive a SIGKILLed controller and are re-attached by
`paratune resume`; a cancel ends the ranks on both nodes. Skipped, with the reason, where not
root or namespaces are not allowed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import ray  # noqa: F401 - a dependency of the project: a broken install fails these tests
from cluster_harness import SCRIPTS, single_process_losses, skip_reason, two_node_cluster
from conftest import ROOT, alive_naming, journal_events, run_cli_process, write_spec

reason = skip_reason()
pytestmark = [pytest.mark.skipif(reason is not None, reason=reason or ""), pytest.mark.slow]
CLIENT = "ray://10.211.0.1:10001"


@pytest.fixture(scope="module")
def cluster():
    with two_node_cluster("ray") as state:
        yield state


@pytest.fixture(scope="module")
def ray_env(cluster):
    """What every driver of this cluster needs (the token, the Ray temp root), from ray.env."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    for line in (cluster / "ray.env").read_text().splitlines():
        key, value = line.removeprefix("export ").split("=", 1)
        env[key] = value
    return env


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The losses of one process on the same model and global batch (16 = 1 x 2 x 8)."""
    return single_process_losses(tmp_path_factory.mktemp("single"),
                                 {"micro_batch_size": 2, "grad_accum_steps": 8}, steps=2)


def drive(env: dict, address: str, *args: str, in_node1: bool = False) -> dict:
    """tests/cluster/ray_trial.py in a driver process of its own (each attaches anew)."""
    argv = [sys.executable, str(SCRIPTS / "ray_trial.py"), address, *args]
    if in_node1:
        argv = ["nsenter", "--net=/run/netns/ptc-node1", *argv]
    start = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    print(f"driver {args[0]} ({address}): {time.time() - start:.1f}s")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def placement(folder) -> list[str]:
    """The node each rank ran on, from the line each rank task writes first in its log."""
    logs = [folder / "trial.log", *(folder / f"rank{r}.log" for r in (1, 2, 3))]
    return [log.read_text().split(" on ", 1)[1].split()[0] for log in logs]


def two_a_node(nodes: list[str]) -> bool:
    """Ranks 0-1 on one node, 2-3 on the other (bundle 0 may be on either)."""
    return nodes[0] == nodes[1] != nodes[2] == nodes[3] and set(nodes) == {"node1", "node2"}


def test_trial_across_two_ray_nodes_trains_like_one_process(cluster, ray_env, reference,
                                                            tmp_path):
    """A driver inside node 1 (address auto). Drivers outside the cluster, through the Ray
    client, run the cancel and the resume tests below."""
    address = "auto"
    out = drive(ray_env, address, "run", str(tmp_path), in_node1=True)
    assert out["nodes"] == ["10.211.0.1", "10.211.0.2"]
    result = out["result"]
    assert result and result["status"] == "ok", result
    assert result["world_size"] == 4
    assert result["loss_first"] == pytest.approx(reference[0], rel=1e-5)
    assert two_a_node(placement(tmp_path / "trial"))
    print(f"2-node Ray trial ({address}): connected in {out['connect_s']:.1f}s, "
          f"trial {out['seconds']:.1f}s")


def test_cancel_ends_the_ranks_on_both_nodes(cluster, ray_env, tmp_path):
    out = drive(ray_env, CLIENT, "run", str(tmp_path), "hang:2")
    assert out["result"]["status"] == "failed" and "Cancelled" in out["result"]["error"]
    assert two_a_node(placement(tmp_path / "trial"))
    assert not alive_naming(tmp_path / "trial"), "the cancelled trial left ranks behind"
    names = [a["name"] for a in drive(ray_env, "auto", "actors", in_node1=True)["actors"]]
    assert out["info"]["ray_actor"] not in names  # killed once the trial ended


@pytest.mark.timeout(1800)  # its trial, SIGKILLed controller and resume share a busy machine
def test_resume_reattaches_a_trial_that_outlived_its_controller(cluster, ray_env, tmp_path):
    """`paratune run` on the cluster (a Ray client), SIGKILLed while its trial runs on both
    nodes; `paratune resume` re-attaches to the trial's actor: one submission, one result,
    one MLflow run, and no actor left."""
    runs = tmp_path / "runs"
    env = {**ray_env, "PARATUNE_RUNS_DIR": str(runs)}
    env.pop("MLFLOW_TRACKING_URI", None)
    spec = write_spec(tmp_path / "r.yaml", name="ray-reattach", search={"algorithm": "grid"},
                      backend={"kind": "ray", "address": CLIENT}, budget={"max_trials": 1},
                      scale={"nodes": 2, "gpus_per_node": 2, "global_batch_size": 16},
                      space={"zero_stage": [0], "micro_batch_size": [2],
                             "activation_checkpointing": ["none"]},
                      trial={"steps": 16, "warmup_steps": 1, "timeout_s": 900,  # a busy machine
                             "env": {"OMP_NUM_THREADS": "1"}})
    controller = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(spec)],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    trial = runs / "ray-reattach" / "trials" / "t0001"
    deadline = time.time() + 400
    while time.time() < deadline and not (trial / "rank3.log").exists():
        time.sleep(0.2)
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    assert (trial / "rank3.log").exists(), "the trial never started on both nodes"
    assert alive_naming(trial), "the trial should outlive its controller"
    resumed = run_cli_process("resume", "ray-reattach", env=env, timeout=1000)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    events = journal_events(runs / "ray-reattach")
    assert [e["event"] for e in events if e["event"] in ("submitted", "reattached")] == \
        ["submitted", "reattached"]  # not submitted again
    (done,) = [e for e in events if e["event"] == "finished"]
    assert done["result"]["status"] == "ok" and done["result"]["world_size"] == 4
    assert two_a_node(placement(trial))
    assert drive(ray_env, "auto", "actors", in_node1=True)["actors"] == []

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("paratune/ray-reattach")
    runs_ = client.search_runs([experiment.experiment_id])
    children = [r.data.tags["paratune.trial_id"] for r in runs_
                if r.data.tags.get("mlflow.parentRunId")]
    assert children == ["t0001"]
