"""`paratune resume` names each trial it re-attached, a line each, with what it runs as (the
launcher's PID, the Slurm job): here a local trial that ended with its result while no
controller watched, which resume takes over rather than running it again."""

from __future__ import annotations

import json
import subprocess
import time

import yaml
from conftest import journal_events, write_spec

from orchestrator.cli import main
from orchestrator.common.processes import start_time
from orchestrator.record.journal import Journal, TrialRecord, spec_digest
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import fitted_candidates
from orchestrator.trial.folder import TrialFolder


def orphaned_campaign(tmp_path, runs_dir) -> int:
    """A one-trial local campaign whose controller died after its trial had left its result;
    the PID its launcher had."""
    spec = load_spec(write_spec(tmp_path / "c.yaml", name="orphan", budget={"max_trials": 1},
                                tracking={"enabled": False}))
    folder = runs_dir / "orphan"
    folder.mkdir(parents=True)
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    journal = Journal(folder / "journal.jsonl", name="orphan", digest=spec_digest(spec))
    journal.append("campaign", name="orphan", started_at=time.time(),
                   spec_digest=spec_digest(spec))
    launcher = subprocess.Popen(["sleep", "60"])
    handle = {"pid": launcher.pid, "pgid": launcher.pid, "start_time": start_time(launcher.pid),
              "started_at": time.time()}
    launcher.kill()
    launcher.wait()
    journal.record_submitted(TrialRecord("t0001", fitted_candidates(spec)[0], handle=handle))
    trial = TrialFolder.of(folder, "t0001")
    trial.path.mkdir(parents=True)
    trial.result_file.write_text(json.dumps({"status": "ok", "tokens_per_s": 12.0}))
    return launcher.pid


def test_resume_names_the_trial_it_reattached(tmp_path, runs_dir, capsys):
    pid = orphaned_campaign(tmp_path, runs_dir)
    code = main(["resume", "orphan"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert [e["event"] for e in journal_events(runs_dir / "orphan") if "trial_id" in e] == \
        ["submitted", "reattached", "finished"]
    (line,) = [line for line in err.splitlines() if "re-attached" in line]
    assert "t0001" in line and str(pid) in line


def test_a_slurm_trial_is_named_by_its_job():
    from orchestrator.cli.resume_lines import running_as

    assert "Slurm job 4242" in running_as({"slurm_job": "4242", "slurm_folder": "/x"})
