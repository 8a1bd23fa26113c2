"""`paratune status` on the local runs directory says how each campaign stands: running,
stopped (resumable, its unfinished trials named so), finished with why, or cancelled; one
unreadable campaign folder does not hide the others, and an empty runs folder says so."""

from __future__ import annotations

import json
import os
import socket

import yaml
from builders import cli_json
from conftest import write_spec

from orchestrator.common.locks import LOCK_FILE
from orchestrator.record.journal import Journal


def run_simulated_campaign(tmp_path, cli, name: str, trials: int = 2) -> None:
    spec = write_spec(tmp_path / f"{name}.yaml", name=name, budget={"max_trials": trials},
                      backend={"kind": "simulated"}, tracking={"enabled": False})
    assert cli("run", str(spec))[0] == 0


def leave_a_trial_unfinished(runs_dir, name: str) -> None:
    """The journal as a controller killed mid-trial leaves it: a trial submitted, no end."""
    journal = Journal(runs_dir / name / "journal.jsonl")
    finished = [e for e in journal.events() if e["event"] == "finished"][-1]
    journal.append("submitted", trial_id="t0099", config=finished["config"], handle={},
                   phase="search")


def test_a_finished_campaign_says_why_its_search_stopped(tmp_path, runs_dir, cli):
    run_simulated_campaign(tmp_path, cli, "done")
    report = cli_json(cli, "status", "done")
    assert report["state"] == "finished" and report["stop_reason"] == "max_trials 2 reached"
    text = cli("status", "done")[1]
    assert "done: finished (max_trials 2 reached)" in text


def test_a_stopped_campaign_names_its_unfinished_trials_and_the_resume(tmp_path, runs_dir, cli):
    run_simulated_campaign(tmp_path, cli, "cut")
    leave_a_trial_unfinished(runs_dir, "cut")
    report = cli_json(cli, "status", "cut")
    assert report["state"] == "stopped" and report["counts"].get("unfinished") == 1
    assert "running" not in report["counts"]
    assert "continue with `paratune resume cut`" in cli("status", "cut")[1]


def test_a_campaign_whose_controller_lives_is_running(tmp_path, runs_dir, cli):
    run_simulated_campaign(tmp_path, cli, "live")
    leave_a_trial_unfinished(runs_dir, "live")
    (runs_dir / "live" / LOCK_FILE).write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname()}))
    report = cli_json(cli, "status", "live")
    assert report["state"] == "running" and report["counts"].get("running") == 1


def test_a_broken_campaign_folder_does_not_hide_the_others(tmp_path, runs_dir, cli):
    run_simulated_campaign(tmp_path, cli, "good")
    (runs_dir / "broken").mkdir()
    (runs_dir / "broken" / "spec.yaml").write_text(yaml.safe_dump({"name": "broken"}))
    code, out, err = cli("status")
    assert code == 0 and "good: finished" in out
    assert "broken: cannot be read:" in err
    every = json.loads(cli("status", "--json")[1])
    assert [c["campaign"] for c in every["campaigns"]] == ["good"]
    assert [u["campaign"] for u in every["unreadable"]] == ["broken"]


def test_no_campaign_under_the_runs_folder_is_said(tmp_path, cli):
    code, _, err = cli("status", "--runs-dir", str(tmp_path / "nothing"))
    assert code == 2 and "no campaigns under" in err and "--runs-dir" in err
    assert json.loads(cli("status", "--runs-dir", str(tmp_path), "--json")[1]) == {"campaigns": []}
