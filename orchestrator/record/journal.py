"""The campaign journal: an append-only JSON-lines file, the single source of truth for resume.

Each line is one event, flushed and fsynced before the controller acts on it: `submitted`
(a trial was handed to the backend), `reattached` (a resumed controller took over a trial that
still ran), `finished` (its final result), `tracked` (its MLflow run exists); for the campaign,
`campaign` (started), `campaign_end` (completed, with its stop reason), `campaign_cancelled`
(`paratune cancel` ended it) and `budget_changed` (`resume --set budget.KEY=VALUE`: the key,
its old and its new value). A torn last line, left by a kill mid-write, is ended before the
next event is appended, so that event starts on a line of its own. Any line a reader cannot
use is skipped, counted and named once (record/journal_lines.py); the rest still count.

A trial's phase (search, screen, confirm, repeat, scaling, target) is stored in the event's
`fidelity` key, the format every journal has used: "screen", "repeat", "scaling" and "target"
as they are, "full" for a search trial,
or for a confirm trial in a campaign that screens (successive halving); the journal tells the
two apart by whether the campaign has screened anything.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.common.errors import CampaignStateError, excerpt
from orchestrator.record.journal_lines import Damage, open_journal, parse_lines, read_raw
from orchestrator.result import TrialResult
from orchestrator.space import Layout

log = logging.getLogger(__name__)

# The phases of a trial: why it was run.
SEARCH = "search"  # proposed by the searcher and measured in full
SCREEN = "screen"  # proposed by the searcher, measured with few steps (successive halving)
CONFIRM = "confirm"  # a screened layout promoted to a full measurement
SCALING = "scaling"  # the best layout re-run at another node count
REPEAT = "repeat"  # a layout measured again, in full, because it is close to the best
TARGET = "target"  # a slice campaign's layout measured at its full target scale
PHASES = (SEARCH, SCREEN, CONFIRM, SCALING, REPEAT, TARGET)
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
    config: Layout
    submitted_at: float | None = None
    handle: dict[str, Any] = field(default_factory=dict)
    result: TrialResult | None = None
    finished_at: float | None = None
    run_id: str | None = None
    phase: str = SEARCH
    # What a running trial's log last said it was doing (warm-up, timed, ...); not journaled.
    activity: str | None = field(default=None, compare=False)

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


def spec_digest(spec: Any) -> str:
    """The fingerprint of what gives a campaign's layouts their meaning (model, cluster,
    scale), journaled with the campaign so that a journal copied in from another campaign is
    recognised; a saved budget or search section may still be edited."""
    identity = spec.model_dump(mode="json", include={"model", "cluster", "scale"})
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


class Journal:
    def __init__(self, path: Path, *, name: str | None = None, digest: str | None = None):
        self.path = Path(path)
        self.name = name  # the campaign whose journal this must be
        self.digest = digest  # its spec's `spec_digest`, which the journal names
        self._unreadable = Damage()  # lines the last read skipped
        self._unusable = Damage()  # events the last replay of the trials skipped
        self._warned = 0

    def append(self, event: str, **data: Any) -> None:
        line = json.dumps({"event": event, "time": time.time(), **data}, sort_keys=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with os.fdopen(open_journal(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND),
                           "rb+") as fh:
                end = fh.seek(0, os.SEEK_END)
                torn = end > 0 and os.pread(fh.fileno(), 1, end - 1) != b"\n"
                fh.write((b"\n" if torn else b"") + line.encode("utf-8") + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:  # a full disk, a read-only file: what is recorded stays
            raise CampaignStateError(
                f"{self.path}: cannot write to the journal ({exc.strerror or exc}); nothing "
                "recorded is lost: free space or fix permissions, then `paratune resume`"
            ) from None

    def events(self) -> list[dict[str, Any]]:
        """Every sound event, in order; the lines skipped are in `damage`, said once."""
        self._unreadable = Damage()
        events = parse_lines(read_raw(self.path), self._unreadable)
        self._check_owner(events)
        return events

    def _check_owner(self, events: list[dict[str, Any]]) -> None:
        """Refuse a journal another campaign wrote (a folder copied over another)."""
        info = _merged_campaign_info(events)
        if self.name is not None and info.get("name") not in (None, self.name):
            raise CampaignStateError(
                f"{self.path} is the journal of campaign {excerpt(info['name'])}, not "
                f"{self.name!r}; put back this campaign's own journal")
        if None not in (self.digest, info.get("spec_digest")) and \
                info["spec_digest"] != self.digest:
            raise CampaignStateError(
                f"{self.path} was written for another model, cluster or scale than its "
                "campaign's spec; a journal belongs to the spec it ran: put back this "
                "campaign's own journal")

    @property
    def damage(self) -> Damage:
        """What the last reads skipped: unreadable lines, and events the replay could not use."""
        return Damage(self._unreadable.lines + self._unusable.lines)

    def warn_damage(self) -> None:
        """Say (once per new damage) which lines the last read skipped."""
        damage = self.damage
        if len(damage.lines) > self._warned:
            self._warned = len(damage.lines)
            log.warning(damage.summary(self.path))

    def campaign_info(self) -> dict[str, Any]:
        """Merged payloads of every `campaign` event (name, MLflow parent run, ...)."""
        return _merged_campaign_info(self.events())

    def trials(self) -> dict[str, TrialRecord]:
        """The state of every trial, replayed from the events in order; an event whose config
        or result cannot be read is skipped, and named, like a damaged line."""
        records: dict[str, TrialRecord] = {}
        self._unusable = Damage()
        events = [e for e in self.events() if "trial_id" in e]
        screens = any(e.get("fidelity") == SCREEN for e in events)
        for event in events:
            try:
                _replay(records, event, screens)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                self._unusable.skip(None, f"{event['event']} event of {event['trial_id']}: "
                                    f"{excerpt(str(exc), 100, quote=False)}")
        self.warn_damage()
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

    def record_budget_change(self, key: str, old: Any, new: Any) -> None:
        self.append("budget_changed", key=key, old=old, new=new)

    def record_tracked(self, trial_id: str, layout: Layout, run_id: str) -> None:
        self.append("tracked", trial_id=trial_id, config=layout.to_dict(), run_id=run_id)


def _merged_campaign_info(events: list[dict[str, Any]]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for event in events:
        if event["event"] == "campaign":
            info.update({k: v for k, v in event.items() if k not in ("event", "time")})
    return info


def _replay(records: dict[str, TrialRecord], event: dict[str, Any], screens: bool) -> None:
    """Apply one trial event to the records."""
    kind, trial_id = event["event"], event["trial_id"]
    record = records.get(trial_id)
    if record is None:
        record = TrialRecord(trial_id, Layout.from_dict(event["config"]),
                             phase=phase_of(event.get("fidelity", _FULL), screens))
    if kind == "submitted":
        record.submitted_at = event["time"]
        record.handle = event.get("handle", {})
    elif kind == "reattached":
        record.handle = event.get("handle", record.handle)
    elif kind == "finished":
        result = TrialResult.from_dict(event["result"])  # read even when a repeat, to check it
        if record.result is not None:
            return
        record.result, record.finished_at = result, event["time"]
        record.submitted_at = record.submitted_at or event["time"]
    elif kind == "tracked":
        record.run_id = event["run_id"]
    records[trial_id] = record
