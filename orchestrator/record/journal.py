"""The campaign journal: an append-only JSON-lines file, the single source of truth for resume.

Each line is one event, flushed and fsynced before the controller acts on it: `submitted`
(a trial was handed to the backend), `reattached` (a resumed controller took over a trial that
still ran), `finished` (its final result), `tracked` (its MLflow run exists); for the campaign,
`campaign` (started), `campaign_end` (completed, with its stop reason) and `campaign_cancelled`
(`paratune cancel` ended it). A torn last line, left by a kill mid-write, is ignored, and ended
before the next event is appended, so that event starts on a line of its own.

A trial's phase (search, screen, confirm, repeat, scaling) is stored in the event's `fidelity`
key, the format every journal has used: "screen", "repeat" and "scaling" as they are, "full" for a search trial,
or for a confirm trial in a campaign that screens (successive halving); the journal tells the
two apart by whether the campaign has screened anything.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.result import TrialResult
from orchestrator.space import ParallelConfig

# The phases of a trial: why it was run.
SEARCH = "search"  # proposed by the searcher and measured in full
SCREEN = "screen"  # proposed by the searcher, measured with few steps (successive halving)
CONFIRM = "confirm"  # a screened layout promoted to a full measurement
SCALING = "scaling"  # the best layout re-run at another node count
REPEAT = "repeat"  # a layout measured again, in full, because it is close to the best
PHASES = (SEARCH, SCREEN, CONFIRM, SCALING, REPEAT)
_FULL = "full"  # the journal's word for a search or confirm trial

# The states of a campaign, from its journal.
FINISHED, CANCELLED, INCOMPLETE = "finished", "cancelled", "incomplete"


def fidelity_of(phase: str) -> str:
    """The journal's `fidelity` value for a phase."""
    return _FULL if phase in (SEARCH, CONFIRM) else phase


def phase_of(fidelity: str, screens: bool) -> str:
    """The phase a journal's `fidelity` value stands for, in a campaign that screens or not."""
    if fidelity == _FULL:
        return CONFIRM if screens else SEARCH
    return fidelity


@dataclass
class TrialRecord:
    trial_id: str
    config: ParallelConfig
    submitted_at: float | None = None
    handle: dict[str, Any] = field(default_factory=dict)
    result: TrialResult | None = None
    finished_at: float | None = None
    run_id: str | None = None
    phase: str = SEARCH

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")

    @property
    def pruned(self) -> bool:
        """Pruned as infeasible by the memory model: recorded, never run."""
        return self.result is not None and self.result.status == "infeasible"

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
        with open(self.path, "ab+") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":  # a line torn by a kill mid-write: end it first
                    fh.write(b"\n")
            fh.write(line.encode("utf-8") + b"\n")
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
        events = [e for e in self.events() if e.get("trial_id") is not None]
        screens = any(e.get("fidelity") == SCREEN for e in events)
        for event in events:
            kind, trial_id = event["event"], event["trial_id"]
            record = records.get(trial_id)
            if record is None:
                record = records[trial_id] = TrialRecord(
                    trial_id, ParallelConfig.from_dict(event["config"]),
                    phase=phase_of(event.get("fidelity", _FULL), screens),
                )
            if kind == "submitted":
                record.submitted_at = event["time"]
                record.handle = event.get("handle", {})
            elif kind == "reattached":
                record.handle = event.get("handle", record.handle)
            elif kind == "finished" and record.result is None:
                record.result = TrialResult.from_dict(event["result"])
                record.finished_at = event["time"]
                record.submitted_at = record.submitted_at or event["time"]
            elif kind == "tracked":
                record.run_id = event["run_id"]
        return records

    def record_submitted(self, record: TrialRecord) -> None:
        self.append("submitted", trial_id=record.trial_id, config=record.config.to_dict(),
                    handle=record.handle, fidelity=fidelity_of(record.phase))

    def record_reattached(self, record: TrialRecord) -> None:
        """A resumed controller took over the running trial (no new submission: the first one's
        time and budget stand)."""
        self.append("reattached", trial_id=record.trial_id, config=record.config.to_dict(),
                    handle=record.handle, fidelity=fidelity_of(record.phase))

    def record_finished(self, record: TrialRecord, result: TrialResult) -> None:
        self.append("finished", trial_id=record.trial_id, config=record.config.to_dict(),
                    result=result.to_dict(), fidelity=fidelity_of(record.phase))

    def state(self) -> str:
        """finished | cancelled | incomplete: the campaign's last ending, unless a trial was
        started after it (a resume); journals older than these events read as incomplete."""
        return self.ending()[0]

    def ending(self) -> tuple[str, str | None]:
        """The state (as `state`) and, for a finished campaign, why its search stopped."""
        state, reason = INCOMPLETE, None
        for event in self.events():
            kind = event.get("event")
            if kind == "campaign_end":
                state, reason = FINISHED, event.get("stop_reason")
            elif kind == "campaign_cancelled":
                state, reason = CANCELLED, None
            elif kind in ("submitted", "reattached"):
                state, reason = INCOMPLETE, None
        return state, reason if isinstance(reason, str) else None

    def record_end(self, stop_reason: str | None) -> None:
        self.append("campaign_end", stop_reason=stop_reason)

    def record_cancelled(self, trials_stopped: int) -> None:
        self.append("campaign_cancelled", trials_stopped=trials_stopped)

    def record_tracked(self, trial_id: str, config: ParallelConfig, run_id: str) -> None:
        self.append("tracked", trial_id=trial_id, config=config.to_dict(), run_id=run_id)
