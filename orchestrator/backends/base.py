"""The backend interface, split the way submitit splits it: a backend submits, a handle is polled.

A `TrialRequest` carries everything a backend needs; the handle's `poll()` returns None while the
trial runs and its `TrialResult` once it has ended, however it ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig


@dataclass(frozen=True)
class TrialRequest:
    trial_id: str
    config: ParallelConfig
    trial_dir: Path
    world_size: int
    job_settings: dict[str, Any]  # the JSON the built-in trial job reads (jobs/config.py)
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    # An external trainer's argv (placeholders filled in), run as it is instead of the job.
    command: list[str] | None = None
    workdir: str | None = None
    # Files to write into the trial directory first (name -> text), e.g. a DeepSpeed config.
    files: dict[str, str] = field(default_factory=dict)


class TrialHandle(Protocol):
    def poll(self) -> TrialResult | None: ...

    def cancel(self) -> None: ...

    def info(self) -> dict[str, Any]:
        """What the journal keeps to find this trial again after a controller crash."""
        ...


class Backend(Protocol):
    def submit(self, request: TrialRequest) -> TrialHandle: ...

    def cleanup(self, info: dict[str, Any], trial_dir: Path) -> None:
        """End whatever is left of a trial that a crashed controller had submitted."""
        ...
