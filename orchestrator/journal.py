"""The campaign journal: an append-only JSON-lines file, the single source of truth for resume.

Each line is one event, flushed and fsynced before the controller acts on it: `submitted`
(a trial was handed to the backend), `finished` (its final result), `tracked` (its MLflow run
exists). A torn last line, left by a kill mid-write, is ignored.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig


@dataclass
class TrialRecord:
    trial_id: str
    config: ParallelConfig
    submitted_at: float | None = None
    handle: dict[str, Any] = field(default_factory=dict)
    result: TrialResult | None = None
    finished_at: float | None = None
    run_id: str | None = None
    # "full", or "screen" for a short first measurement under successive halving.
    fidelity: str = "full"

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def duration_s(self) -> float | None:
        if self.submitted_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.submitted_at


class Journal:
    def __init__(self, path: Path):
        self.path = Path(path)

    def append(self, event: str, **data: Any) -> None:
        line = json.dumps({"event": event, "time": time.time(), **data}, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        events = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a kill mid-write
        return events

    def campaign_info(self) -> dict[str, Any]:
        """Merged payloads of every `campaign` event (name, MLflow parent run, ...)."""
        info: dict[str, Any] = {}
        for event in self.events():
            if event["event"] == "campaign":
                info.update({k: v for k, v in event.items() if k not in ("event", "time")})
        return info

    def trials(self) -> dict[str, TrialRecord]:
        """The state of every trial, replayed from the events in order."""
        records: dict[str, TrialRecord] = {}
        for event in self.events():
            kind, trial_id = event["event"], event.get("trial_id")
            if trial_id is None:
                continue
            record = records.get(trial_id)
            if record is None:
                record = records[trial_id] = TrialRecord(
                    trial_id, ParallelConfig.from_dict(event["config"]),
                    fidelity=event.get("fidelity", "full"),
                )
            if kind == "submitted":
                record.submitted_at = event["time"]
                record.handle = event.get("handle", {})
            elif kind == "finished" and record.result is None:
                record.result = TrialResult.from_dict(event["result"])
                record.finished_at = event["time"]
                record.submitted_at = record.submitted_at or event["time"]
            elif kind == "tracked":
                record.run_id = event["run_id"]
        return records

    def record_submitted(self, record: TrialRecord) -> None:
        self.append("submitted", trial_id=record.trial_id, config=record.config.to_dict(),
                    handle=record.handle, fidelity=record.fidelity)

    def record_finished(self, record: TrialRecord, result: TrialResult) -> None:
        self.append("finished", trial_id=record.trial_id, config=record.config.to_dict(),
                    result=result.to_dict(), fidelity=record.fidelity)

    def record_tracked(self, trial_id: str, config: ParallelConfig, run_id: str) -> None:
        self.append("tracked", trial_id=trial_id, config=config.to_dict(), run_id=run_id)
