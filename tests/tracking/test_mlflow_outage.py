"""An MLflow server that goes away mid-campaign: results stay in the journal and reach MLflow
when it is back. The test starts a real `mlflow server` on 127.0.0.1 and stops it by its PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, journal_events, run_cli_process, write_spec
from ports import free_port

from orchestrator.tracking.session import HTTP_DEFAULTS


class MlflowServer:
    def __init__(self, root: Path, port: int):
        self.root, self.port, self.process = root, port, None

    def start(self) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
             f"sqlite:///{self.root / 'mlflow.db'}", "--default-artifact-root",
             (self.root / "artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 240  # a server starts in seconds; far longer on a busy machine
        while time.time() < deadline:
            if self.process.poll() is not None:  # its port taken, say: no use waiting
                pytest.fail(f"mlflow server on port {self.port} exited ({self.process.returncode})")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        pytest.fail("mlflow server did not start")

    def stop(self) -> None:
        """SIGTERM to the group of the PID we started, then SIGKILL if it lingers."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass
        self.process = None


# A trainer whose trial N reports only once the number in the file it is given reaches N: the
# test decides when each trial ends, so the outage falls between known trials.
GATED_TRAINER = """
import json, pathlib, sys, time
ordinal, released = int(sys.argv[1].lstrip("t")), pathlib.Path(sys.argv[2])
deadline = time.monotonic() + 900
while int(released.read_text() or 0) < ordinal:
    if time.monotonic() > deadline:
        sys.exit("never released")
    time.sleep(0.1)
print("PARATUNE_RESULT " + json.dumps({"status": "ok", "tokens_per_s": 1000.0 + ordinal}))
"""
TRIALS = [f"t{n:04d}" for n in range(1, 10)]


def wait_until(condition, what: str, limit: float = 240) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {limit:g}s"
        time.sleep(0.2)


@pytest.mark.slow
def test_results_survive_an_mlflow_outage(tmp_path, runs_dir):
    """Trials 1-3 reach MLflow; it goes away and trials 4-6 finish all the same; it comes back
    and trial 7's end writes 4-7; the campaign ends with every trial in MLflow exactly once."""
    server = MlflowServer(tmp_path, free_port())
    server.start()
    uri = f"http://127.0.0.1:{server.port}"
    released = tmp_path / "released"

    def release(upto: int) -> None:
        staged = tmp_path / "released.new"
        staged.write_text(str(upto))
        staged.replace(released)  # the trainers never read a half-written number

    release(0)
    trainer = tmp_path / "gated_trainer.py"
    trainer.write_text(GATED_TRAINER)
    spec = write_spec(
        tmp_path / "spec.yaml", name="outage", search={"algorithm": "grid"},
        budget={"max_trials": len(TRIALS), "max_concurrent": 1},
        # The knobs are passed (and ignored) so that each layout is a trial of its own.
        trial={"command": [sys.executable, str(trainer), "{trial_id}", str(released),
                           "{zero_stage}", "{micro_batch_size}", "{activation_checkpointing}"],
               "timeout_s": 900},
        # Far below the seconds an MLflow server takes to start: the first trial to end after
        # the server is back tries MLflow again.
        tracking={"uri": uri, "retry_s": 0.2})
    journal = runs_dir / "outage" / "journal.jsonl"

    def trials(kind: str) -> list[str]:
        if not journal.exists():
            return []
        lines = journal.read_text().split("\n")[:-1]  # complete lines only
        return sorted(e["trial_id"] for e in map(json.loads, filter(None, lines))
                      if e["event"] == kind)

    def submitted(trial_id: str):
        return lambda: trial_id in trials("submitted")

    errors = tmp_path / "campaign.err"
    try:
        with errors.open("w") as err:
            campaign = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", "run", str(spec)], cwd=ROOT,
                # A server slow to answer on a busy machine is not an outage.
                env={**os.environ, "PARATUNE_RUNS_DIR": str(runs_dir),
                     "MLFLOW_HTTP_REQUEST_TIMEOUT": "120"},
                stdout=subprocess.DEVNULL, stderr=err)
        try:
            release(3)
            wait_until(lambda: trials("tracked") == TRIALS[:3], "trials 1-3 in MLflow")
            server.stop()  # trial 4 is held: nothing is being written to MLflow as it goes
            release(6)
            # One trial at a time: the loop writes a trial to MLflow before it submits the
            # next, so trial 7 submitted means trial 6's write was tried.
            wait_until(submitted("t0007"), "trial 7 submitted while MLflow is down")
            assert trials("finished") == TRIALS[:6], "the campaign goes on while MLflow is down"
            assert trials("tracked") == TRIALS[:3]
            server.start()
            release(7)
            wait_until(submitted("t0008"), "trial 8 submitted after MLflow is back")
            assert trials("tracked") == TRIALS[:7], "trial 7's end writes what MLflow missed"
            release(len(TRIALS))
            assert campaign.wait(timeout=300) == 0, errors.read_text()[-2000:]
        finally:
            release(len(TRIALS))  # a held trial ends on its own
            if campaign.poll() is None:
                campaign.kill()
                campaign.wait()
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("paratune/outage")
        runs = client.search_runs([experiment.experiment_id],
                                  filter_string="tags.`paratune.kind` = 'trial'")
    finally:
        server.stop()
    assert trials("finished") == TRIALS
    assert sorted(r.data.tags["paratune.trial_id"] for r in runs) == TRIALS  # each one once
    assert trials("tracked") == TRIALS


LAYOUTS = [{"tp": tp, "pp": 1, "zero_stage": 1, "micro_batch_size": 1} for tp in (1, 2, 4, 8)]


def listed_spec(path: Path, uri: str) -> Path:
    path.write_text(yaml.safe_dump({
        "name": "unseen", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 1, "global_batch_size": 64},
        "space": {"kind": "list", "configs": LAYOUTS}, "budget": {"max_trials": 4},
        "backend": {"kind": "simulated"}, "tracking": {"uri": uri},
    }))
    return path


@pytest.fixture
def unreachable(monkeypatch) -> int:
    """A port nothing listens on; MLflow's HTTP retries kept short for this test only."""
    for key, value in HTTP_DEFAULTS.items():
        monkeypatch.setenv(key, value)
    return free_port()


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_run_and_status_say_which_trials_mlflow_lacks(tmp_path, runs_dir, cli, unreachable):
    uri = f"http://127.0.0.1:{unreachable}"
    code, _, err = cli("run", str(listed_spec(tmp_path / "s.yaml", uri)))
    assert code == 0, err  # the results are safe in the journal
    [warning] = warnings(err)
    assert "4 of 4 finished trials are not in MLflow" in warning
    assert uri in warning and "`paratune resume unseen`" in warning

    code, text, _ = cli("status", "unseen")
    assert code == 0 and "4 of 4 finished trials are not in MLflow" in text
    assert "paratune resume unseen" in text
    code, text, _ = cli("status", "unseen", "--json")
    report = json.loads(text)["mlflow"]
    assert report["not_in_mlflow"] == 4 and report["finished"] == 4 and report["uri"] == uri
    assert "paratune resume unseen" in report["fix"]


def test_status_without_tracking_reports_no_backlog(tmp_path, runs_dir, cli):
    spec = listed_spec(tmp_path / "s.yaml", "unused")
    code, _, err = cli("run", str(spec), "--set", "tracking.enabled=false")
    assert code == 0 and not warnings(err), err
    assert json.loads(cli("status", "unseen", "--json")[1])["mlflow"] is None


@pytest.mark.slow
def test_resume_writes_the_backlog_once_mlflow_is_up(tmp_path, runs_dir, cli, unreachable):
    uri = f"http://127.0.0.1:{unreachable}"
    assert cli("run", str(listed_spec(tmp_path / "s.yaml", uri)))[0] == 0
    server = MlflowServer(tmp_path, unreachable)
    server.start()
    try:
        code, _, err = cli("resume", "unseen")
        from mlflow.tracking import MlflowClient

        experiment = MlflowClient(uri).get_experiment_by_name("paratune/unseen")
        runs = MlflowClient(uri).search_runs([experiment.experiment_id],
                                             filter_string="tags.`paratune.kind` = 'trial'")
    finally:
        server.stop()
    assert code == 0 and not warnings(err), err
    assert len(runs) == 4
    report = json.loads(cli("status", "unseen", "--json")[1])["mlflow"]
    assert report["not_in_mlflow"] == 0 and report["fix"] is None


def test_resume_writes_a_lost_store_again_from_the_journal(tmp_path, runs_dir):
    """The store was replaced (here: the SQLite file and artifacts deleted) after the campaign
    ran: the journal still says each trial was tracked, so resume asks MLflow, and writes the
    campaign's run and every trial again, once."""
    import shutil

    from mlflow.tracking import MlflowClient

    spec = listed_spec(tmp_path / "s.yaml", "")
    data = yaml.safe_load(spec.read_text())
    del data["tracking"]["uri"]  # the default store under the runs folder
    spec.write_text(yaml.safe_dump(data))
    # Processes of their own: one that opened the store keeps reading a deleted file.
    assert run_cli_process("run", str(spec)).returncode == 0
    (runs_dir / "mlflow.db").unlink()
    shutil.rmtree(runs_dir / "mlartifacts", ignore_errors=True)
    for _ in range(2):  # twice: the second finds everything there
        done = run_cli_process("resume", "unseen")
        assert done.returncode == 0, done.stderr
        assert ("has lost campaign unseen's run" in done.stderr) == (_ == 0), done.stderr
        client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("paratune/unseen")
        runs = client.search_runs([experiment.experiment_id])
        kinds = sorted(r.data.tags["paratune.kind"] for r in runs)
        assert kinds == ["campaign"] + ["trial"] * 4, kinds
    parents = [e["parent_run_id"] for e in journal_events(runs_dir / "unseen")
               if e["event"] == "campaign" and "parent_run_id" in e]
    assert parents[-1] in {r.info.run_id for r in runs} and len(set(parents)) == 2
