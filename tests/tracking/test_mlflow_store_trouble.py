"""MLflow as a mirror that stays true: one run per trial, and one campaign run, when a
campaign's journal is cut, emptied or deleted and `resume` measures the lost trials again; a
copied runs directory never writes into the original's; a damaged store is said once, in one
line, and the campaign goes on with its results in the journal."""

from __future__ import annotations

import collections
import logging
import os
import shutil

import pytest
from conftest import write_spec
from mlflow.tracking import MlflowClient

TRIALS = 6


def runs_by_kind(runs_dir, name: str) -> dict[str, collections.Counter]:
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(f"paratune/{name}")
    found = client.search_runs([experiment.experiment_id], max_results=5000)
    kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for run in found:
        kinds[run.data.tags["paratune.kind"]][run.data.tags.get("paratune.trial_id", "")] += 1
    return kinds


@pytest.mark.parametrize("loss", ["cut", "emptied", "deleted"])
def test_resume_after_journal_loss_keeps_one_run_per_trial(tmp_path, runs_dir, cli, loss):
    spec = write_spec(tmp_path / "j.yaml", name="lost", budget={"max_trials": TRIALS},
                      search={"algorithm": "grid"}, backend={"kind": "simulated"})
    assert cli("run", str(spec))[0] == 0
    journal = runs_dir / "lost" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    if loss == "cut":
        journal.write_text("".join(lines[: len(lines) // 2]))
    elif loss == "emptied":
        journal.write_text("")
    else:
        journal.unlink()
    code, _, err = cli("resume", "lost")
    assert code == 0, err
    kinds = runs_by_kind(runs_dir, "lost")
    assert sum(kinds["campaign"].values()) == 1, kinds
    assert len(kinds["trial"]) == TRIALS and set(kinds["trial"].values()) == {1}, kinds


def test_a_copied_runs_directory_never_writes_into_the_original(tmp_path, runs_dir, cli,
                                                               monkeypatch):
    """MLflow keeps artifact locations absolute: the copy's store names the original's
    folder, so the copy refuses to write there and says why, and its results stay in its own
    journal."""
    spec = write_spec(tmp_path / "c.yaml", name="copied", budget={"max_trials": 2},
                      backend={"kind": "simulated"})
    assert cli("run", str(spec))[0] == 0
    copy = tmp_path / "copy"
    shutil.copytree(runs_dir, copy)
    monkeypatch.delenv("PARATUNE_RUNS_DIR")  # the copy is named by --runs-dir alone
    before = sorted(p for p in (runs_dir / "mlartifacts").rglob("*"))
    code, _, err = cli("report", "copied", "--runs-dir", str(copy))
    assert code == 0 and "outside this runs" in " ".join(err.split()), err
    saved = copy / "copied" / "spec.yaml"
    saved.write_text(saved.read_text().replace("max_trials: 2", "max_trials: 3"))
    code, _, err = cli("resume", "copied", "--runs-dir", str(copy))
    assert code == 0 and "not in MLflow yet" in err, err  # kept in the copy's journal
    assert sorted(p for p in (runs_dir / "mlartifacts").rglob("*")) == before
    assert len([line for line in (copy / "copied" / "journal.jsonl").read_text().splitlines()
                if '"finished"' in line]) == 3


def test_a_damaged_store_is_said_once_in_one_line_and_the_campaign_goes_on(tmp_path, runs_dir,
                                                                         cli, caplog):
    spec = write_spec(tmp_path / "d.yaml", name="damaged", budget={"max_trials": 2},
                      backend={"kind": "simulated"})
    assert cli("run", str(spec))[0] == 0
    store = runs_dir / "mlflow.db"
    store.write_bytes(os.urandom(store.stat().st_size))
    for extra in ("mlflow.db-wal", "mlflow.db-shm"):
        (runs_dir / extra).unlink(missing_ok=True)
    saved = runs_dir / "damaged" / "spec.yaml"
    saved.write_text(saved.read_text().replace("max_trials: 2", "max_trials: 4"))
    caplog.set_level(logging.WARNING)
    code, _, err = cli("resume", "damaged")
    assert code == 0, err
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "is damaged" in said[0] and "\n" not in said[0], said
    finished = [line for line in (runs_dir / "damaged" / "journal.jsonl").read_text().splitlines()
                if '"finished"' in line]
    assert len(finished) == 4
