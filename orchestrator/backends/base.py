"""The backend interface, split the way submitit splits it: a backend submits, a handle is polled.

A `TrialRequest` carries everything a backend needs to run one trial; the handle's `poll()`
returns None while the trial runs and its `TrialResult` once it has ended, however it ended.
`Backend` declares the optional parts with working defaults, as Ray Tune's `Searcher` does, so
the controller calls them on every backend without asking what it can do.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from orchestrator.result import TrialResult
from orchestrator.space import Layout
from orchestrator.trainers import Measure, TrainerAdapter, TrainerRun
from orchestrator.trainers.result_reading import read_trial_result
from orchestrator.trial.folder import TrialFolder
from orchestrator.trial.process import TrialProcess, local_argv, trial_env


@dataclass(frozen=True)
class TrialRequest:
    trial_id: str
    config: Layout
    folder: TrialFolder
    trainer: TrainerAdapter  # reads the result where the trial ran
    run: TrainerRun  # the program, its launcher, its files and environment
    measure: Measure
    steps: int  # timed steps (fewer for a screening trial)
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)  # the spec's trial.env; wins over run.env
    workdir: str | None = None

    @property
    def world_size(self) -> int:
        return self.config.world_size

    def prepare(self) -> None:
        """Write the trial's files into its folder (and clear an earlier attempt's result)."""
        self.folder.prepare(self.run.files)

    def read_result(self, returncode: int | None) -> TrialResult:
        """The result the trial left in its folder, read by its trainer's adapter."""
        return read_trial_result(self.folder, returncode, self.trainer, self.measure)


class TrialHandle(ABC):
    @abstractmethod
    def poll(self) -> TrialResult | None:
        """None while the trial runs; its result once it has ended."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the trial and everything it started."""

    def info(self) -> dict[str, Any]:
        """What the journal keeps to find this trial again after a controller crash."""
        return {}


class Backend(ABC):
    @abstractmethod
    def submit(self, request: TrialRequest) -> TrialHandle:
        """Start one trial."""

    def submit_many(self, requests: list[TrialRequest]) -> list[TrialHandle]:
        """Start several trials at once (a cluster backend may batch them, e.g. as a job
        array); by default one `submit` each."""
        return [self.submit(request) for request in requests]

    def reattach(self, info: dict[str, Any], request: TrialRequest) -> TrialHandle | None:
        """A handle on a trial a previous controller submitted, if it still runs; by default
        none (its trial is run again)."""
        return None

    def cleanup(self, info: dict[str, Any], folder: TrialFolder) -> None:
        """End whatever is left of a trial a crashed controller had submitted and that will be
        run again; by default nothing outlives a trial."""

    def shutdown(self) -> None:
        """Release what the backend started (a runtime, connections); by default nothing."""


def start_trial(request: TrialRequest, cpu_count: int | None = None) -> TrialProcess:
    """Shared by the local backend and the code a cluster backend runs on a node:
    prepare the trial folder and start the trial's launcher (torchrun or the program)."""
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
