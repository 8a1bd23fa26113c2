"""Local backend: each trial is a `torchrun --standalone` process tree on this machine.

A trainer that starts its own ranks (`trial.command`) runs as its argv, never through a
shell. The whole tree is what gets killed, so a timeout or a cancel leaves no rank behind.
Logs and the result go to the trial's folder (trial_folder.py).
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.trial_process import TrialProcess, kill_leftovers, local_argv, trial_env
from orchestrator.result import TrialResult
from orchestrator.trial_folder import TrialFolder


def start_trial(request: TrialRequest, cpu_count: int | None = None) -> TrialProcess:
    """Prepare the trial folder and start the trial's launcher (torchrun or the program)."""
    request.prepare()
    folder = request.folder
    cpus = cpu_count or os.cpu_count() or 1
    env = trial_env(folder, request.trial_id, {
        "OMP_NUM_THREADS": str(max(1, cpus // request.world_size)),
        "TMPDIR": str(folder.tmp_dir),  # torchrun leaves a torchelastic_* folder per launch
        **request.run.env, **request.env,
    })
    return TrialProcess(local_argv(request.run, request.world_size), folder=folder, env=env,
                        timeout_s=request.timeout_s, world_size=request.world_size,
                        read_result=request.read_result, cwd=request.workdir)


class LocalHandle(TrialHandle):
    def __init__(self, process: TrialProcess):
        self.process = process

    def poll(self) -> TrialResult | None:
        return self.process.poll()

    def cancel(self) -> None:
        self.process.kill()

    def info(self) -> dict[str, Any]:
        return {"pid": self.process.pid, "pgid": self.process.pid}


class LocalBackend(Backend):
    def __init__(self, cpu_count: int | None = None):
        self.cpu_count = cpu_count

    def submit(self, request: TrialRequest) -> LocalHandle:
        return LocalHandle(start_trial(request, self.cpu_count))

    def cleanup(self, info: dict[str, Any], folder: TrialFolder) -> None:
        kill_leftovers(folder, info.get("pid"))
