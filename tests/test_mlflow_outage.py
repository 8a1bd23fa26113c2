"""An MLflow server that goes away mid-campaign: results stay in the journal and reach MLflow
when it is back. The test starts a real `mlflow server` on 127.0.0.1 and stops it by its PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, journal_events


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        deadline = time.time() + 90
        while time.time() < deadline:
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


@pytest.mark.slow
def test_results_survive_an_mlflow_outage(tmp_path, runs_dir):
    port = free_port()
    server = MlflowServer(tmp_path, port)
    server.start()
    uri = f"http://127.0.0.1:{port}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "outage", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 64, "global_batch_size": 2048},
        "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "zero_stage": [1, 3],
                  "micro_batch_size": [1, 2], "activation_checkpointing": ["full"]},
        "search": {"algorithm": "random"}, "budget": {"max_trials": 24, "max_concurrent": 1},
        "backend": {"kind": "simulated", "latency_s": 1.0},
        "tracking": {"uri": uri, "retry_s": 1.0},
    }))
    campaign = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(spec)], cwd=ROOT,
        env={**os.environ, "PARATUNE_RUNS_DIR": str(runs_dir)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        journal = runs_dir / "outage"

        def tracked() -> int:
            if not (journal / "journal.jsonl").exists():
                return 0
            return sum(e["event"] == "tracked" for e in journal_events(journal))

        deadline = time.time() + 120
        while tracked() < 3 and time.time() < deadline:
            time.sleep(0.2)
        assert tracked() >= 3
        server.stop()  # the server goes away mid-campaign
        down_at = len([e for e in journal_events(journal) if e["event"] == "finished"])
        time.sleep(6)
        during = len([e for e in journal_events(journal) if e["event"] == "finished"])
        assert during > down_at, "the campaign goes on while MLflow is down"
        server.start()  # and comes back
        assert campaign.wait(timeout=300) == 0, campaign.stderr.read()[-2000:]
    finally:
        if campaign.poll() is None:
            campaign.kill()
        events = journal_events(runs_dir / "outage")
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("paratune/outage")
        runs = client.search_runs([experiment.experiment_id],
                                  filter_string="tags.`paratune.kind` = 'trial'")
        server.stop()
    finished = [e for e in events if e["event"] == "finished"]
    ran = sorted(e["trial_id"] for e in finished if e["result"]["status"] != "infeasible")
    assert sorted(r.data.tags["paratune.trial_id"] for r in runs) == ran  # pruned: no run
    assert len(ran) >= 24
