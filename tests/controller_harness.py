"""Real controllers driving `trial.command` trials that leave what a test wants in their folders:
the campaign, the trial program (one branch per trial ID) and the controller run as a process
whose memory and time are bounded (killed, and the test failed, beyond them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, journal_events

PEAK_MEMORY_MB = 300  # a controller holds about 100 MB; reading a 400 MB log whole is far more
CONTROLLER_LIMIT_S = 120  # far above what these few-second campaigns need on a busy machine
TRACEBACK = re.compile(r"^Traceback", re.M)  # the controller's own (a trial's is in its row)
GOOD = '{"status": "ok", "tokens_per_s": 100.0, "step_time_s": 1.0}'


def trial_program(cases: dict[str, str]) -> str:
    """A trial program that does what `cases` says for its trial ID, then exits 0."""
    branches = "".join(f"if trial == {tid!r}:\n    {code}\n" for tid, code in cases.items())
    return ("import os, sys\nresult = os.environ['PARATUNE_RESULT_FILE']\n"
            "here = os.path.dirname(result)\nlog = os.path.join(here, 'trial.log')\n"
            "trial = os.environ['PARATUNE_TRIAL_ID']\n" + branches)


def command_spec(path: Path, name: str, program: str, trials: int, **trial) -> Path:
    """A campaign of `trials` local runs of `program` (a grid wide enough for them)."""
    script = path.with_suffix(".py")
    script.write_text(program)
    spec = {
        "name": name, "model": "tiny", "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "space": {"tp": [1, 2], "pp": [1], "zero_stage": [0], "micro_batch_size": [1, 2, 4],
                  "activation_checkpointing": ["none", "selective", "full"]},
        "search": {"algorithm": "grid"}, "budget": {"max_trials": trials, "max_concurrent": 1},
        "backend": {"kind": "local"}, "tracking": {"enabled": False},
        "trial": {"command": [sys.executable, str(script), "{tp}", "{micro_batch_size}",
                              "{activation_checkpointing}"], "timeout_s": 60, **trial},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _vm_hwm_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), "VmHWM: 0 kB")
    return int(line.split()[1]) / 1024


def controller(runs_dir: Path, *args: str, stop_when=None) -> tuple[int, str, float]:
    """Run `paratune ARGS` as a process: (exit code, stderr, its peak memory in MB). It is
    killed, and the test fails, where it outgrows PEAK_MEMORY_MB or CONTROLLER_LIMIT_S;
    `stop_when()` true sends it SIGTERM."""
    with open(runs_dir.parent / "controller.err", "w+") as err:
        process = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                                   env={**os.environ, "PARATUNE_RUNS_DIR": str(runs_dir)},
                                   stdout=subprocess.DEVNULL, stderr=err)
        deadline, peak, stopped = time.monotonic() + CONTROLLER_LIMIT_S, 0.0, False
        while process.poll() is None:
            peak = max(peak, _vm_hwm_mb(process.pid))
            if peak > PEAK_MEMORY_MB or time.monotonic() > deadline:
                process.kill()
                process.wait()
                pytest.fail(f"paratune {' '.join(args)}: killed at {peak:.0f} MB after "
                            f"{CONTROLLER_LIMIT_S - deadline + time.monotonic():.0f} s")
            if stop_when is not None and not stopped and stop_when():
                process.send_signal(signal.SIGTERM)
                stopped = True
            time.sleep(0.02)
        err.seek(0)
        return process.returncode, err.read(), peak


def finished(campaign: Path) -> dict[str, dict]:
    """Each finished trial's result, by its ID, as the journal has it."""
    events = journal_events(campaign)
    return {e["trial_id"]: e["result"] for e in events if e["event"] == "finished"}
