"""The Slurm backend against a real one-node Slurm (munge, slurmdbd, slurmctld, slurmd) that
tests/slurm/start_local_slurm.sh starts; `make test` and CI start it. Skipped, with the reason
printed, where no Slurm answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, builtin_request, journal_events, wait_for_result, write_spec
from local_slurm import slurm_backend, slurm_missing
from test_failures_and_external import TINY, processes_naming


reason = slurm_missing()
pytestmark = pytest.mark.skipif(reason is not None, reason=reason or "")
ENV = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def request(tmp_path: Path, name: str, timeout_s: float = 300, env: dict | None = None, **settings):
    return builtin_request(
        tmp_path / name, name, {"model": TINY, "dp": 2, "micro_batch_size": 2,
                                "grad_accum_steps": 2, "steps": 2, "warmup_steps": 1, **settings},
        timeout_s=timeout_s, env={**ENV, **(env or {})},
    )


def sacct_state(job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id],
                         capture_output=True, text=True).stdout.split()
    return out[0] if out else ""


def test_campaign_on_slurm_with_two_tasks_per_trial(tmp_path, runs_dir, cli):
    spec = write_spec(tmp_path / "s.yaml", name="on-slurm", backend={"kind": "slurm"},
                      search={"algorithm": "grid"}, budget={"max_trials": 2, "max_concurrent": 2},
                      space={"zero_stage": [0, 3], "micro_batch_size": [4],
                             "activation_checkpointing": ["none"]},
                      trial={"steps": 2, "warmup_steps": 1, "timeout_s": 300, "env": ENV})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    events = journal_events(runs_dir / "on-slurm")
    finished = [e for e in events if e["event"] == "finished"]
    assert [e["result"]["status"] for e in finished] == ["ok", "ok"]
    job_ids = [e["handle"]["slurm_job"] for e in events if e["event"] == "submitted"]
    assert len({j.split("_")[0] for j in job_ids}) == 1 and all("_" in j for j in job_ids)  # one array
    for e in finished:
        trial_dir = runs_dir / "on-slurm" / "trials" / e["trial_id"]
        assert "#SBATCH" in (trial_dir / "sbatch.sh").read_text(), "the sbatch script is kept"
        assert (trial_dir / "rank1.log").exists()  # the second rank ran as its own task
    for job in job_ids:
        assert sacct_state(job) == "COMPLETED"


def test_cancel_ends_the_job_and_its_ranks(tmp_path):
    handle = slurm_backend().submit(request(tmp_path, "hang", env={"PARATUNE_INJECT_FAULT": "hang"}))
    deadline = time.time() + 60
    while time.time() < deadline and not processes_naming(str(tmp_path / "hang")):
        time.sleep(0.5)
    assert processes_naming(str(tmp_path / "hang"))
    handle.cancel()
    deadline = time.time() + 30
    while time.time() < deadline and processes_naming(str(tmp_path / "hang")):
        time.sleep(0.5)
    assert not processes_naming(str(tmp_path / "hang"))
    result = wait_for_result(handle)
    assert result.status == "failed" and "cancelled (ended" in result.error
    assert handle.requeues == 0  # one job: a cancel is never undone by a resubmission
    assert sacct_state(handle.job.job_id).startswith("CANCELLED")


def test_trial_timeout_inside_the_job(tmp_path):
    handle = slurm_backend().submit(request(tmp_path, "slow", timeout_s=8,
                                      env={"PARATUNE_INJECT_FAULT": "hang"}))
    result = wait_for_result(handle)
    assert result.status == "timeout" and "timeout_s=8" in result.error, result.error
    assert not processes_naming(str(tmp_path / "slow"))


class _EndedJob:
    """Stand-in for a submitit job in a terminal Slurm state: the mapping alone. The real
    daemons' TIMEOUT and NODE_FAIL are tested on two nodes in test_cluster_slurm.py."""

    def __init__(self, state: str):
        self.state, self.job_id = state, "42"

    def get_info(self, mode: str = "force") -> dict[str, str]:
        return {"State": self.state}

    def cancel(self, check: bool = False) -> None:
        pass


@pytest.mark.parametrize("state,status", [("TIMEOUT", "timeout"), ("OUT_OF_MEMORY", "oom"),
                                          ("FAILED", "failed"), ("NODE_FAIL", "failed")])
def test_slurm_states_map_to_statuses(tmp_path, state, status):
    from orchestrator.backends.slurm import SlurmHandle

    slurm = slurm_backend()
    slurm.spec = slurm.spec.model_copy(update={"max_requeues": 0})
    req = request(tmp_path, "x")
    req.folder.path.mkdir()
    result = SlurmHandle(slurm, req, _EndedJob(state)).poll()
    assert result.status == status and state in result.error


def _submitted_then_orphaned(tmp_path, runs_dir, name: str, steps: int):
    """A one-trial Slurm campaign whose controller is killed once the trial is submitted:
    (the environment to resume with, the job's id)."""
    spec = write_spec(tmp_path / "s.yaml", name=name, backend={"kind": "slurm"},
                      search={"algorithm": "grid"}, budget={"max_trials": 1},
                      space={"zero_stage": [0], "micro_batch_size": [4],
                             "activation_checkpointing": ["none"]},
                      trial={"steps": steps, "warmup_steps": 1, "timeout_s": 300, "env": ENV})
    env = {**os.environ, "PARATUNE_RUNS_DIR": str(runs_dir)}
    controller = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(spec)],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = runs_dir / name / "journal.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (journal.exists() and '"submitted"' in journal.read_text()):
        time.sleep(0.2)
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    (job,) = [e["handle"]["slurm_job"] for e in journal_events(runs_dir / name)
              if e["event"] == "submitted"]
    return env, job


def test_resume_reattaches_a_running_job(tmp_path, runs_dir):
    env, job = _submitted_then_orphaned(tmp_path, runs_dir, "reattach", steps=40)
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    assert queued.stdout.strip() in ("RUNNING", "PENDING")  # the job outlived its controller
    resumed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "reattach"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    events = journal_events(runs_dir / "reattach")
    assert len([e for e in events if e["event"] == "submitted"]) == 1  # not submitted again
    (done,) = [e for e in events if e["event"] == "finished"]
    assert done["result"]["status"] == "ok" and sacct_state(job) == "COMPLETED"


def test_resume_reads_a_job_that_ended_while_no_controller_ran(tmp_path, runs_dir):
    """The controller dies, the job runs to its end and leaves the queue, then the campaign is
    resumed: the job's result is read, and the trial is not submitted again."""
    env, job = _submitted_then_orphaned(tmp_path, runs_dir, "ended", steps=2)
    deadline = time.time() + 300
    while time.time() < deadline and sacct_state(job) != "COMPLETED":
        time.sleep(0.5)
    assert sacct_state(job) == "COMPLETED"
    resumed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "ended"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    events = journal_events(runs_dir / "ended")
    assert len([e for e in events if e["event"] == "submitted"]) == 1  # not submitted again
    (done,) = [e for e in events if e["event"] == "finished"]
    assert done["result"]["status"] == "ok"


def test_torchrun_trainer_runs_one_launcher_per_node(tmp_path, runs_dir, cli, monkeypatch):
    """A DeepSpeed trial on Slurm: one task per node runs torchrun, which meets the other
    nodes' at the allocation's first host (one node here) and starts the node's ranks."""
    monkeypatch.chdir(ROOT)
    data = yaml.safe_load((ROOT / "examples" / "deepspeed.yaml").read_text())
    data.update(name="ds-on-slurm", backend={"kind": "slurm"}, search={"algorithm": "grid"},
                budget={"max_trials": 1})
    data["space"].update(zero_stage=[2], micro_batch_size=[1])
    data["trial"]["env"] = {**data["trial"]["env"], "PYTHONPATH": str(ROOT)}
    spec = tmp_path / "ds.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    events = journal_events(runs_dir / "ds-on-slurm")
    (finished,) = [e for e in events if e["event"] == "finished"]
    assert finished["result"]["status"] == "ok", finished["result"].get("error")
    assert finished["result"]["tokens_per_s"] > 0
    script = (runs_dir / "ds-on-slurm" / "trials" / finished["trial_id"] / "sbatch.sh").read_text()
    assert "--ntasks-per-node=1" in script
    log = (runs_dir / "ds-on-slurm" / "trials" / finished["trial_id"] / "trial.log").read_text()
    assert "global_step=" in log and not (runs_dir / "ds-on-slurm" / "trials" /
                                          finished["trial_id"] / "rank1.log").exists()
