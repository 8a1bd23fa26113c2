"""The live display: on resume it counts the trials finished before, not only the new ones."""

from __future__ import annotations

import io

import pytest
import yaml
from rich.console import Console

from orchestrator.cli.live_display import CampaignProgress
from orchestrator.scheduling.controller import Controller
from orchestrator.campaign_spec import load_spec


class Crash(Exception):
    pass


def test_resume_counts_the_trials_already_done(tmp_path, runs_dir, cli):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "counted", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 8, "global_batch_size": 512},
        "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "zero_stage": [1, 2, 3],
                  "micro_batch_size": [1, 2], "activation_checkpointing": ["full"]},
        "search": {"algorithm": "random", "seed": 1}, "budget": {"max_trials": 8},
        "backend": {"kind": "simulated"}, "tracking": {"enabled": False},
    }))
    finished = []

    def crash_after_five(kind, record):
        if kind == "finished" and record.result.status != "infeasible":
            finished.append(record)
            if len(finished) == 5:
                raise Crash

    with pytest.raises(Crash):
        Controller(load_spec(path), on_event=crash_after_five).run()
    code, _, err = cli("resume", "counted")
    assert code == 0, err
    assert "8/8" in err and "3/8" not in err

    screen = Console(file=io.StringIO(), width=200)
    progress = CampaignProgress(screen, load_spec(path))
    progress.already_done(finished)
    assert progress.progress.tasks[0].completed == 5
    values = [r.result.tokens_per_s for r in finished if r.result.ok]
    assert progress.best.value == max(values)


def test_the_live_best_is_a_full_measurement_once_there_is_one(tmp_path):
    """A screen runs a few steps: its value is shown as screened until a full measurement
    exists, and never as the campaign's best after that (as `status` and `best` choose)."""
    from orchestrator.record.journal import CONFIRM, SCREEN, TrialRecord
    from orchestrator.result import TrialResult
    from orchestrator.space import Layout

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "live", "model": "tiny", "cluster": "cpu-local",
                                    "scale": {"nodes": 1, "global_batch_size": 8},
                                    "backend": {"kind": "simulated"}}))
    screen = Console(file=io.StringIO(), width=200)
    progress = CampaignProgress(screen, load_spec(path))

    def ended(trial_id: str, phase: str, value: float) -> TrialRecord:
        record = TrialRecord(trial_id, Layout(), phase=phase)
        record.result = TrialResult(status="ok", tokens_per_s=value)
        progress.update("finished", record)
        return record

    ended("t0001", SCREEN, 900.0)
    assert progress.best.screened_only and progress.progress.tasks[0].fields["status"] == (
        "best screened tokens_per_s 900")
    ended("t0002", CONFIRM, 700.0)
    ended("t0003", SCREEN, 950.0)
    assert progress.best.value == 700.0 and not progress.best.screened_only
    assert progress.progress.tasks[0].fields["status"] == "best tokens_per_s 700"
    progress.progress.stop()
