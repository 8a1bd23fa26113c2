"""The backend interface, split the way submitit splits it: a backend submits, a handle is polled.

A `TrialRequest` carries everything a backend needs to run one trial; the handle's `poll()`
returns None while the trial runs and its `TrialResult` once it has ended, however it ended.
`Backend` declares the optional parts with working defaults, as Ray Tune's `Searcher` does, so
the controller calls them on every backend without asking what it can do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig
from orchestrator.trial_folder import TrialFolder


@dataclass(frozen=True)
class TrialRequest:
    trial_id: str
    config: ParallelConfig
    folder: TrialFolder
    job_settings: dict[str, Any]  # the JSON the built-in trial job reads (jobs/config.py)
    steps: int  # timed steps (fewer for a screening trial)
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    # An external trainer's argv (placeholders filled in), run as it is instead of the job.
    command: list[str] | None = None
    workdir: str | None = None
    # Files to write into the trial folder first (name -> text), e.g. a DeepSpeed config.
    files: dict[str, str] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.config.world_size


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
