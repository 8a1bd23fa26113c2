"""A first run that fails from its spec leaves no campaign behind, and the spec a campaign is
saved with is always the one its trials ran with, so `resume` never meets an old error."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.backends import Backend
from orchestrator.common.locks import LOCK_FILE
from orchestrator.scheduling.controller import Controller
from orchestrator.campaign_spec import SPEC_FILE, load_spec


def spec_file(path, name="five", configs=None, **sections):
    data = {
        "name": name, "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 1, "global_batch_size": 64},
        "space": {"kind": "list", "configs": configs or [
            {"tp": 2, "pp": 1, "zero_stage": 1, "micro_batch_size": 1},
            {"tp": 4, "pp": 1, "zero_stage": 1, "micro_batch_size": 1}]},
        "budget": {"max_trials": 2}, "backend": {"kind": "simulated"},
        "tracking": {"enabled": False}, **sections,
    }
    path.write_text(yaml.safe_dump(data))
    return path


BAD_LAYOUT = [{"tp": 2, "pp": 1, "zero_stage": 1, "micro_batch_size": 1, "bogus": 3}]


def test_unknown_layout_field_then_fixed_spec_runs_and_resumes(tmp_path, runs_dir, cli):
    code, _, err = cli("run", str(spec_file(tmp_path / "bad.yaml", configs=BAD_LAYOUT)))
    assert code == 2 and "space.configs[0]" in err and "bogus" in err
    assert not (runs_dir / "five").exists()  # no spec, journal or lock left behind

    code, _, err = cli("run", str(spec_file(tmp_path / "good.yaml")))
    assert code == 0, err
    saved = yaml.safe_load((runs_dir / "five" / SPEC_FILE).read_text())
    assert "bogus" not in str(saved["space"]["configs"])
    code, _, err = cli("resume", "five")
    assert code == 0, err


def test_missing_warm_start_source_leaves_nothing(tmp_path, runs_dir, cli):
    spec = spec_file(tmp_path / "ws.yaml", search={"warm_start": "nosuch"}, tracking={})
    code, _, err = cli("run", str(spec))
    assert code == 2 and "nosuch" in err
    assert not (runs_dir / "five").exists()


def test_unreadable_base_config_fails_before_the_campaign_is_written(tmp_path, runs_dir, cli):
    spec = spec_file(tmp_path / "ds.yaml", trial={
        "trainer": "deepspeed",
        "deepspeed": {"script": "train.py", "config": str(tmp_path / "missing.json")}})
    code, _, err = cli("run", str(spec))
    assert code == 2 and "trial.deepspeed.config" in err
    assert not (runs_dir / "five").exists()


def test_run_replaces_the_spec_of_a_campaign_without_trials(tmp_path, runs_dir, cli):
    """A directory an earlier release left after a failed start: spec, journal, lock, no
    trial. `run` starts it afresh from the new spec, and `resume` reads that one."""
    campaign = runs_dir / "five"
    campaign.mkdir(parents=True)
    old = yaml.safe_load(spec_file(tmp_path / "old.yaml", configs=BAD_LAYOUT).read_text())
    (campaign / SPEC_FILE).write_text(yaml.safe_dump(old))
    (campaign / "journal.jsonl").write_text('{"event": "campaign", "name": "five", '
                                            '"started_at": 1.0, "time": 1.0}\n')
    (campaign / LOCK_FILE).write_text('{"pid": 1, "host": "gone"}')
    code, _, err = cli("run", str(spec_file(tmp_path / "good.yaml")))
    assert code == 0, err
    assert "bogus" not in (campaign / SPEC_FILE).read_text()
    code, _, err = cli("resume", "five")
    assert code == 0, err


@pytest.mark.parametrize("command", ["run", "resume"])
def test_a_campaign_with_trials_keeps_its_spec(tmp_path, runs_dir, cli, command):
    assert cli("run", str(spec_file(tmp_path / "first.yaml")))[0] == 0
    before = (runs_dir / "five" / SPEC_FILE).read_text()
    other = spec_file(tmp_path / "other.yaml", budget={"max_trials": 1})
    code, _, err = cli(command, str(other) if command == "run" else "five")
    assert code == (2 if command == "run" else 0), err
    assert (runs_dir / "five" / SPEC_FILE).read_text() == before


class Refused(Exception):
    pass


class RefusingBackend(Backend):
    def submit(self, request):
        raise Refused("the backend would not start the trial")


def test_a_start_that_fails_before_any_trial_removes_the_new_directory(tmp_path, runs_dir):
    spec = load_spec(spec_file(tmp_path / "good.yaml"))
    with pytest.raises(Refused):
        Controller(spec, backend=RefusingBackend()).run()
    assert not (runs_dir / "five").exists()


def test_a_runs_folder_that_cannot_be_made_names_the_key_that_moves_it(tmp_path, cli,
                                                                      monkeypatch):
    monkeypatch.delenv("PARATUNE_RUNS_DIR", raising=False)
    (tmp_path / "a-file").write_text("")
    path = spec_file(tmp_path / "s.yaml", tracking={"runs_dir": str(tmp_path / "a-file" / "runs")})
    code, _, err = cli("run", str(path))
    assert code == 2 and "tracking.runs_dir: cannot create" in err
    assert "--set tracking.runs_dir=DIR" in err and "--runs-dir" not in err
