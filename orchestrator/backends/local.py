"""Local backend: each trial is a `torchrun --standalone` process tree on this machine.

A trainer that starts its own ranks (`trial.command`) runs as its argv, never through a
shell. The whole tree is what gets killed, so a timeout or a cancel leaves no rank behind.
Logs and the result go to the trial's folder (trial/folder.py). A trial outlives a controller
killed with SIGKILL; the next controller re-attaches to it by its launcher's PID and start time.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest, start_trial
from orchestrator.common.processes import is_running, kill_tree, start_time
from orchestrator.result import TrialResult
from orchestrator.trial.activity import compilers_below
from orchestrator.trial.folder import TrialFolder
from orchestrator.trial.process import (
    TrialProcess,
    kill_leftovers,
    timeout_result,
)


class LocalHandle(TrialHandle):
    def __init__(self, process: TrialProcess):
        self.process = process
        self.start_time = start_time(process.pid)  # our child: not reaped, so still there
        self.started_at = time.time()

    def poll(self) -> TrialResult | None:
        return self.process.poll()

    def cancel(self) -> None:
        self.process.kill()

    def info(self) -> dict[str, Any]:
        return {"pid": self.process.pid, "pgid": self.process.pid,
                "start_time": self.start_time, "started_at": self.started_at}


class OrphanHandle(TrialHandle):
    """A trial whose launcher outlived the controller that started it. It is no child of ours:
    whether it runs is read from /proc (its PID and start time), the timeout counts from its
    journaled start, and its result is read from its folder once it ends (exit code unknown)."""

    def __init__(self, info: dict[str, Any], request: TrialRequest):
        self.saved = dict(info)
        self.pid, self.start_time = int(info["pid"]), int(info["start_time"])
        self.started_at = float(info.get("started_at") or time.time())
        self.request = request

    def _alive(self) -> bool:
        return is_running(self.pid, self.start_time)

    def poll(self) -> TrialResult | None:
        if self._alive():
            if time.time() - self.started_at <= self.request.timeout_s:
                return None
            compilers = compilers_below(self.pid)
            self.cancel()
            return timeout_result(self.request.timeout_s, self.request.world_size, compilers)
        kill_leftovers(self.request.folder)  # ranks that outlived their launcher
        return self.request.read_result(None)

    def cancel(self) -> None:
        if self._alive():
            kill_tree(self.pid)
        kill_leftovers(self.request.folder)

    def info(self) -> dict[str, Any]:
        return self.saved


class LocalBackend(Backend):
    def __init__(self, cpu_count: int | None = None):
        self.cpu_count = cpu_count

    def submit(self, request: TrialRequest) -> LocalHandle:
        return LocalHandle(start_trial(request, self.cpu_count))

    def reattach(self, info: dict[str, Any], request: TrialRequest) -> OrphanHandle | None:
        """The trial's launcher, if the very process that was started still runs, or its
        result if it ended with one while no controller watched; else None (it runs again).
        Journals of earlier releases lack the start time: their trials run again."""
        if not info.get("pid") or info.get("start_time") is None:
            return None
        if is_running(int(info["pid"]), int(info["start_time"])) or \
                request.folder.result_file.exists():
            return OrphanHandle(info, request)
        return None

    def cleanup(self, info: dict[str, Any], folder: TrialFolder) -> None:
        kill_leftovers(folder, info.get("pid"))
