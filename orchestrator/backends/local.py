"""Local backend: each trial is a `torchrun --standalone` process tree on this machine.

An external trainer (`trial.command`) runs as its argv, never through a shell, and launches
its own ranks. The whole tree is what gets killed, so a timeout or a cancel leaves no rank
behind. Logs and the result go to the trial's folder (trial_folder.py).
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.trial_process import (
    TrialProcess,
    builtin_job_argv,
    kill_leftovers,
    trial_env,
)
from orchestrator.result import TrialResult
from orchestrator.trial_folder import TrialFolder


def start_trial(request: TrialRequest, cpu_count: int | None = None) -> TrialProcess:
    """Prepare the trial folder and start the trial's launcher (torchrun or the command)."""
    folder = request.folder
    folder.prepare(request.job_settings, request.files)
    cpus = cpu_count or os.cpu_count() or 1
    argv = list(request.command) if request.command else \
        builtin_job_argv(folder, request.world_size)
    env = trial_env(folder, request.trial_id, {
        "OMP_NUM_THREADS": str(max(1, cpus // request.world_size)),
        "TMPDIR": str(folder.tmp_dir),  # torchrun leaves a torchelastic_* folder per launch
        **request.env,
    })
    return TrialProcess(argv, folder=folder, env=env, timeout_s=request.timeout_s,
                        world_size=request.world_size, cwd=request.workdir)


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
