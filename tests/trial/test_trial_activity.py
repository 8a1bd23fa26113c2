"""What a trial is doing is visible while it runs: the built-in trainer logs its phases
(building, warm-up, timed), the live view follows the last phase line of a running trial's log,
and a trial killed at its timeout while a compiler ran below it says it was compiling, in its
log and its error, where its own log is empty."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from conftest import write_spec

from orchestrator.backends.base import TrialRequest
from orchestrator.backends.local import LocalBackend
from orchestrator.record.journal import TrialRecord
from orchestrator.scheduling.controller import Controller
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.trainers import CommandTrainer, Measure, TrainerRun
from orchestrator.trial.activity import last_activity
from orchestrator.trial.folder import TrialFolder

# Prints a phase, waits until the test has seen it (a file appears), prints the next, reports.
GATED = """
import json, pathlib, sys, time
release = pathlib.Path(sys.argv[1])
for n, phase in enumerate(["compiling the model", "timed, 3 steps"]):
    print("paratune phase: " + phase, flush=True)
    deadline = time.monotonic() + 600
    while not (release / str(n)).exists():
        if time.monotonic() > deadline:
            sys.exit("never released")
        time.sleep(0.05)
print("PARATUNE_RESULT " + json.dumps({"status": "ok", "tokens_per_s": 1000.0}))
"""


def test_the_built_in_trainer_logs_its_phases(tmp_path, runs_dir, cli):
    spec = write_spec(tmp_path / "s.yaml", name="phases", budget={"max_trials": 1},
                      space={"zero_stage": [0], "micro_batch_size": [1],
                             "activation_checkpointing": ["none"]})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    log = (runs_dir / "phases" / "trials" / "t0001" / "trial.log").read_text()
    phases = [line.split("paratune phase: ", 1)[1] for line in log.splitlines()
              if "paratune phase: " in line]
    assert phases == ["building the model and its layout", "warm-up, 2 steps", "timed, 6 steps"]
    assert last_activity(runs_dir / "phases" / "trials" / "t0001" / "trial.log") == \
        "timed, 6 steps"


def test_the_live_view_follows_a_running_trials_phase(tmp_path, runs_dir):
    program = tmp_path / "gated.py"
    program.write_text(GATED)
    release = tmp_path / "release"
    release.mkdir()
    spec = load_spec(write_spec(
        tmp_path / "s.yaml", name="live", budget={"max_trials": 1},
        space={"zero_stage": [0], "micro_batch_size": [1], "activation_checkpointing": ["none"]},
        trial={"command": [sys.executable, str(program), str(release)], "timeout_s": 900},
        tracking={"enabled": False}))
    seen: list[str] = []

    def follow(kind: str, record: TrialRecord) -> None:
        if kind == "activity":
            seen.append(record.activity)
            (release / str(len(seen) - 1)).touch()  # let the trial go on to its next phase

    summary = Controller(spec, on_event=follow).run()
    assert seen == ["compiling the model", "timed, 3 steps"]
    assert summary.best is not None


def test_a_timeout_while_compiling_says_so(tmp_path):
    """A stand-in compiler (a script named ninja) runs below the trial until its timeout."""
    ninja = tmp_path / "ninja"
    ninja.write_text("#!/bin/bash\nsleep 600\n")
    ninja.chmod(0o755)
    folder = TrialFolder(tmp_path / "t1")
    run = TrainerRun(program=[str(ninja)], launcher="self")
    request = TrialRequest(
        trial_id="t1", config=Layout(dp=1), folder=folder, trainer=CommandTrainer(),
        run=run, measure=Measure(1, 8, 8, 1.0, 1.0, 0), steps=1, timeout_s=3.0, env={},
        workdir=str(tmp_path))
    handle = LocalBackend().submit(request)
    deadline = time.monotonic() + 600  # a bound for a hung test only
    while (result := handle.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert result is not None and result.status == "timeout"
    assert "compiling (ninja running)" in result.error and "DS_BUILD_OPS=1" in result.error
    assert "compiling (ninja running)" in folder.log_file.read_text()
    assert Path(folder.log_file).read_text().startswith("paratune: trial.timeout_s=3s passed")
