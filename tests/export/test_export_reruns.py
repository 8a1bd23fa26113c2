"""A launch file runs the program the campaign measured: the winner of a real `trial.command`
campaign (a user's DDP script) and of a real DeepSpeed campaign, exported with `paratune best
--format torchrun` and run as a user would, logs the very losses its trial logged."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, journal_events

RUN_TIMEOUT_S = 1200  # a bound for a hung run only; a busy machine takes minutes

LOSS_LINES = {"command-ddp": re.compile(r"^step \d+ loss ([0-9.]+)", re.M),
              "deepspeed-gpt": re.compile(r"^step=\d+ loss=([0-9.]+)", re.M)}


def with_venv_path(monkeypatch) -> dict[str, str]:
    """torchrun as the trials find it: the interpreter's own bin folder first on PATH."""
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    return {**os.environ, "PATH": path}


def rerun_winner(cli, runs_dir: Path, name: str, tmp_path: Path, env: dict) -> tuple[str, str]:
    """(the winner's trial log, the exported script's output), run from another folder."""
    script = tmp_path / "launch.sh"
    code, _, err = cli("best", name, "--format", "torchrun", "-o", str(script))
    assert code == 0, err
    winner = next(e["trial_id"] for e in reversed(journal_events(runs_dir / name))
                  if e["event"] == "finished" and e["result"]["status"] == "ok")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run([str(script)], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT_S)
    assert ran.returncode == 0, ran.stderr[-3000:]
    log = (runs_dir / name / "trials" / winner / "trial.log").read_text()
    return log, ran.stdout + ran.stderr


@pytest.mark.slow
@pytest.mark.timeout(3 * RUN_TIMEOUT_S)
@pytest.mark.parametrize("example,settings", [
    ("command-ddp.yaml", ["budget.max_trials=1", "space.micro_batch_size=[2]",
                          "space.activation_checkpointing=[full]"]),
    ("deepspeed.yaml", ["budget.max_trials=1", "space.zero_stage=[2]",
                        "space.micro_batch_size=[1]"]),
])
def test_the_exported_script_reproduces_the_winners_losses(example, settings, runs_dir, cli,
                                                           monkeypatch, tmp_path):
    env = with_venv_path(monkeypatch)
    monkeypatch.chdir(EXAMPLES.parent)
    overrides = [f"trial.timeout_s={RUN_TIMEOUT_S}", *settings]
    code, _, err = cli("run", str(EXAMPLES / example), *[a for s in overrides
                                                          for a in ("--set", s)])
    assert code == 0, err
    name = "command-ddp" if example.startswith("command") else "deepspeed-gpt"
    trial_log, rerun = rerun_winner(cli, runs_dir, name, tmp_path, env)
    losses = LOSS_LINES[name]
    measured = losses.findall(trial_log)
    assert len(measured) >= 2, trial_log[-2000:]
    assert losses.findall(rerun) == measured, rerun[-3000:]
