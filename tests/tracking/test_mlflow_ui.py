"""What a person browsing MLflow sees: trial runs with their real durations, pruned layouts kept
apart from failures, training-run experiments, and the link `paratune ui` prints opening the
trial table sorted by the objective (checked in headless Chromium)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT
from ports import free_port
from screenshots import CHROMIUM, chromium, keep_screenshot

# The quickstart on the simulated backend, each trial taking about a second, on a device so
# small that 13 of the 16 layouts are pruned as infeasible and 3 run.
QUICKSTART = ["--set", "backend.kind=simulated", "--set", "backend.latency_s=1.0",
              "--set", "cluster.memory_gb=0.55"]
# A second campaign of the same store that minimises its objective.
FASTEST = ["--set", "name=fastest", "--set", "backend.kind=simulated",
           "--set", "objective={metric: step_time_s, mode: min}", "--set", "budget.max_trials=3"]


def run_cli(*args: str, runs: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PARATUNE_RUNS_DIR": str(runs)})
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A runs directory with two simulated campaigns tracked to its SQLite store."""
    runs = tmp_path_factory.mktemp("mlflow-ui") / "runs"
    run_cli("run", str(EXAMPLES / "quickstart.yaml"), *QUICKSTART, runs=runs)
    run_cli("run", str(EXAMPLES / "quickstart.yaml"), *FASTEST, runs=runs)
    return runs


def client_of(runs: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")


def runs_of(runs: Path, campaign: str) -> list:
    client = client_of(runs)
    experiment = client.get_experiment_by_name(f"paratune/{campaign}")
    return client.search_runs([experiment.experiment_id])


def journal_records(runs: Path, campaign: str) -> dict:
    from orchestrator.record.journal import Journal

    return Journal(runs / campaign / "journal.jsonl").trials()


def test_trial_runs_last_as_long_as_the_trials(store):
    records = journal_records(store, "quickstart")
    trials = [r for r in runs_of(store, "quickstart") if r.data.tags["paratune.kind"] == "trial"]
    assert len(trials) == 3
    for run in trials:
        record = records[run.data.tags["paratune.trial_id"]]
        assert run.info.start_time / 1000 == pytest.approx(record.submitted_at, abs=1.0)
        assert run.info.end_time / 1000 == pytest.approx(record.finished_at, abs=1.0)
        assert (run.info.end_time - run.info.start_time) / 1000 >= 0.9  # a 1 s trial, not 0.02 s


def test_pruned_layouts_are_summarised_not_logged_as_failed_runs(store):
    records = journal_records(store, "quickstart")
    pruned = sorted(t for t, r in records.items() if r.result.status == "infeasible")
    ran = sorted(t for t, r in records.items() if r.result.status != "infeasible")
    assert len(pruned) == 13 and len(ran) == 3
    runs = runs_of(store, "quickstart")
    trials = [r for r in runs if r.data.tags["paratune.kind"] == "trial"]
    assert sorted(r.data.tags["paratune.trial_id"] for r in trials) == ran
    assert all(r.info.status == "FINISHED" for r in trials)  # nothing reads as a failure
    (campaign,) = [r for r in runs if r.data.tags["paratune.kind"] == "campaign"]
    assert campaign.data.metrics["trials_infeasible"] == 13
    assert "13 layouts were pruned" in campaign.data.tags["mlflow.note.content"]
    path = client_of(store).download_artifacts(campaign.info.run_id, "pruned_layouts.json")
    table = json.loads(Path(path).read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert sorted(row["trial_id"] for row in rows) == pruned
    assert all(row["predicted_memory_gb"] > 0.55 and "GB" in row["reason"] for row in rows)


def test_campaign_experiments_open_as_training_runs(store):
    """Set when the experiment is created, and again on resume for an experiment without it."""
    client = client_of(store)
    experiment = client.get_experiment_by_name("paratune/quickstart")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    client.delete_experiment_tag(experiment.experiment_id, "mlflow.experimentKind")
    run_cli("resume", "quickstart", runs=store)
    experiment = client.get_experiment(experiment.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert len(runs_of(store, "quickstart")) == 4  # resuming wrote nothing twice


def test_saved_view_sorts_trials_by_the_objective_in_its_direction(store):
    client = client_of(store)
    for campaign, key, ascending in (("quickstart", "metrics.`tokens_per_s`", False),
                                     ("fastest", "metrics.`step_time_s`", True)):
        tags = client.get_experiment_by_name(f"paratune/{campaign}").tags
        view = json.loads(tags["mlflow.sharedViewState.paratune-trials"])
        assert view["orderByKey"] == key and view["orderByAsc"] is ascending
        assert view["selectedColumns"][0] == key
        assert view["searchFilter"] == "tags.`paratune.kind` = 'trial'"


def test_ui_links_every_campaign_or_the_one_asked_for(store):
    from orchestrator.cli.reports import trial_links

    uri, server = f"sqlite:///{store / 'mlflow.db'}", "http://127.0.0.1:5999"
    every = dict(trial_links(uri, store, server, None))
    assert sorted(every) == ["fastest", "quickstart"]
    ids = {c: client_of(store).get_experiment_by_name(f"paratune/{c}").experiment_id for c in every}
    for campaign, link in every.items():
        assert link == (f"{server}/#/experiments/{ids[campaign]}/runs?"
                        "viewStateShareKey=paratune-trials&workflowType=machine_learning")
    assert trial_links(uri, store, server, "fastest") == [("fastest", every["fastest"])]


def test_run_names_are_the_trial_and_its_layout_without_implied_parts():
    from orchestrator.tracking.view import run_name

    assert run_name("t0007", "tp2-pp4-dp1-z0-mbs2-gas1-acnone") == "t0007 tp2 pp4 mb2"
    assert run_name("t0012", "tp1-pp1-dp2-z3-mbs4-gas1-acfull") == "t0012 z3 mb4 acfull"
    assert run_name("t0013", "tp16-pp12-dp1-z1-mbs1-gas8-acnone") == "t0013 tp16 pp12 z1 mb1"


def test_trial_runs_have_short_names_rounded_metrics_and_their_knobs_as_view_columns(store):
    """Checked after a resume and `paratune ui`'s links reopened the experiment."""
    records = journal_records(store, "quickstart")
    trials = [r for r in runs_of(store, "quickstart") if r.data.tags["paratune.kind"] == "trial"]
    for run in trials:
        trial_id, params = run.data.tags["paratune.trial_id"], run.data.params
        name = run.info.run_name
        assert params["tp"] == params["pp"] == "1"  # the defaults: left out of the name
        assert name.startswith(f"{trial_id} "), name
        assert f" mb{params['micro_batch_size']}" in name and len(name) <= 20, name
        assert not re.search(r"\b(dp|gas|tp|pp)\d|acnone|-", name), name
        result, metrics = records[trial_id].result, run.data.metrics
        assert metrics["tokens_per_s"] == round(result.tokens_per_s, 1)
        assert metrics["mfu"] == round(result.mfu, 4)
        assert metrics["step_time_s"] == float(f"{result.step_time_s:.4g}")
        assert metrics["peak_memory_gb"] == float(f"{result.peak_memory_gb:.4g}")
    view = json.loads(client_of(store).get_experiment_by_name("paratune/quickstart")
                      .tags["mlflow.sharedViewState.paratune-trials"])
    layouts = [r.data.params for r in trials]
    varying = [k for k in layouts[0] if len({p[k] for p in layouts}) > 1 and k != "fidelity"]
    assert varying, layouts  # the three trials differ in some knob
    columns = view["selectedColumns"]
    assert columns[0] == "metrics.`tokens_per_s`"
    assert sorted(columns[1:1 + len(varying)]) == sorted(f"params.`{k}`" for k in varying)
    assert view["columnOrder"][1:] == columns


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_ui_link_opens_the_trial_table_in_a_headless_browser(store, tmp_path):
    """`paratune ui` (its own PID, stopped by it) prints a link once the server answers (not
    a minute before, onto "connection refused"), as the last line of its output, the server's
    own messages in the campaign's mlflow-ui.log; Chromium opened on it shows one row per
    trial that ran, best objective first, with the objective's values."""
    port, log, errors = free_port(), tmp_path / "ui.out", tmp_path / "ui.err"
    with open(log, "w") as sink, open(errors, "w") as error_sink:
        ui = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "ui", "quickstart",
                               "--runs-dir", str(store), "--port", str(port)], cwd=ROOT,
                              stdout=sink, stderr=error_sink, start_new_session=True)
    try:
        link, deadline = None, time.time() + 300
        while time.time() < deadline:
            found = re.search(r"^quickstart: (http://\S+)$", log.read_text(), re.M)
            if found:  # printed: the server answers at once
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).status == 200
                link = found.group(1)
                break
            time.sleep(0.5)
        assert link and link.startswith(f"http://127.0.0.1:{port}/#/experiments/"), log.read_text()
        assert log.read_text().splitlines()[-1] == f"quickstart: {link}"
        terminal = log.read_text() + errors.read_text()
        assert len(terminal.splitlines()) <= 4, terminal
        assert not re.search(r"uvicorn|starlette|Warning|INFO", terminal, re.I), terminal
        server_log = store / "quickstart" / "mlflow-ui.log"
        assert str(server_log) in errors.read_text() and server_log.stat().st_size > 0
        shot = tmp_path / "mlflow-trials.png"
        chromium(link, tmp_path / "profile-shot", f"--screenshot={shot}", window="1400,900",
                 budget_ms=20000)
        dom = chromium(link, tmp_path / "profile-dom", "--dump-dom", window="1400,900",
                       budget_ms=20000).stdout
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # `paratune ui` became the server: same PID, own group
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
    assert shot.exists() and shot.stat().st_size > 20_000

    trials = {r.data.tags["paratune.trial_id"]: r.data.metrics["tokens_per_s"]
              for r in runs_of(store, "quickstart") if r.data.tags["paratune.kind"] == "trial"}
    rows: dict[int, dict] = {}  # row-index -> what its cells show, across the grid's containers
    for row in re.finditer(r'<div[^>]*role="row"[^>]*row-index="(\d+)"(.*?)(?=<div[^>]*role="row"|$)',
                           dom, re.S):
        cells = rows.setdefault(int(row.group(1)), {})
        text = re.sub(r"<[^>]+>", " ", row.group(2))  # what the cells show, not their styles
        ids = re.findall(r"\bt\d{4}\b", text)
        values = re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", text)
        if ids and "trial" not in cells:
            cells["trial"] = ids[0]
        if values and "value" not in cells:
            cells["value"] = float(values[0])
    shown = [rows[i] for i in sorted(rows)]
    assert [r["trial"] for r in shown] == sorted(trials, key=trials.get, reverse=True)
    for row in shown:  # the objective is the first metric column
        assert row["value"] == pytest.approx(trials[row["trial"]])
    pruned = [t for t, r in journal_records(store, "quickstart").items()
              if r.result.status == "infeasible"]
    assert not any(re.search(rf"\b{t}\b", dom) for t in pruned)
    keep_screenshot(shot, "mlflow-trials.png")
