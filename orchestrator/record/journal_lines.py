"""Reading a journal line by line, so that damage costs a line, never the campaign.

A journal may be cut by a kill mid-write, hand-edited, half-copied or hit by a bad disk. Each
line is checked on its own: a line that is not UTF-8, not JSON, not an object, nested deeper
than an event ever is, holding a number no float can hold (every reader computes in floats), or
an event of the wrong shape is skipped, counted and named (`Damage`), and every other line still
counts.
The file itself is opened without following a symbolic link: a journal is only ever appended
to where the campaign keeps it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.common.bounded_files import kind_of, size_words
from orchestrator.common.bounded_json import NotJson, UnfitJson, loads_bounded
from orchestrator.common.errors import CampaignStateError, excerpt

TRIAL_EVENTS = ("submitted", "reattached", "finished", "tracked")
CAMPAIGN_EVENTS = ("campaign", "campaign_end", "campaign_cancelled", "budget_changed")
FIDELITIES = ("full", "screen", "repeat", "scaling", "target")
NAMED_AT_MOST = 3  # lines named in the one-line summary; the count covers the rest
JOURNAL_MAX_BYTES = 256 << 20  # what a reader takes in
MAX_DEPTH = 16  # an event nests 4 levels (a result's extra holding a mapping); deeper is damage


@dataclass
class Damage:
    """The lines a read skipped: (line number, or None for an event found unusable on
    replay, and why), in the order found."""

    lines: list[tuple[int | None, str]] = field(default_factory=list)

    def skip(self, number: int | None, why: str) -> None:
        self.lines.append((number, why))

    def __bool__(self) -> bool:
        return bool(self.lines)

    def summary(self, path: Path) -> str:
        """One line: how many lines were skipped, naming the first few."""
        n = len(self.lines)
        named = "; ".join(why if number is None else f"line {number}: {why}"
                          for number, why in self.lines[:NAMED_AT_MOST])
        more = f"; and {n - NAMED_AT_MOST} more" if n > NAMED_AT_MOST else ""
        return (f"{path}: skipped {n} line{'s' * (n != 1)} it cannot use ({named}{more}); "
                "the other lines count as they are")


def open_journal(path: Path, flags: int) -> int:
    """A file descriptor on the journal, refusing a symbolic link, a directory, a FIFO or a
    device with one line (O_NONBLOCK: a FIFO's open never waits for a writer)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                     0o644)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):  # a directory opens read-only without an error
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            raise CampaignStateError(
                f"{path} is {kind_of(mode)}, not a journal; move it away (the campaign then "
                "reads as having no trials)")
        return fd
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CampaignStateError(
                f"{path} is a symbolic link; a journal is never followed elsewhere: put the "
                "campaign's own journal file there") from None
        if exc.errno == errno.EISDIR:
            raise CampaignStateError(
                f"{path} is a directory, not a journal; move it away (the campaign then reads "
                "as having no trials)") from None
        raise CampaignStateError(f"{path}: cannot open the journal ({exc.strerror or exc}); "
                                 "check the file's permissions and the disk") from None


def read_raw(path: Path) -> bytes:
    """The journal's bytes; empty when there is none."""
    try:
        fd = open_journal(path, os.O_RDONLY)
    except CampaignStateError:
        if not os.path.lexists(path):
            return b""
        raise
    with os.fdopen(fd, "rb") as fh:
        # Its size first, so a file too large is not read at all; one growing meanwhile is
        # read to one byte past the limit.
        too_large = os.fstat(fd).st_size > JOURNAL_MAX_BYTES
        raw = b"" if too_large else fh.read(JOURNAL_MAX_BYTES + 1)
    if too_large or len(raw) > JOURNAL_MAX_BYTES:
        raise CampaignStateError(
            f"{path} is larger than {size_words(JOURNAL_MAX_BYTES)}, far past any campaign's "
            "journal (a 1,000-trial one is a few MB); something other than the campaign wrote "
            "it: move it away")
    return raw


def parse_lines(raw: bytes, damage: Damage) -> list[dict[str, Any]]:
    """Every event of the journal whose line is sound; the others go to `damage`."""
    events = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            event = loads_bounded(line, MAX_DEPTH)
        except UnfitJson as exc:
            damage.skip(number, str(exc))
            continue
        except NotJson as exc:
            damage.skip(number, "not UTF-8 text" if "UTF-8" in str(exc)
                        else "not JSON (a line cut short by a kill reads so)")
            continue
        why = event_problem(event)
        if why:
            damage.skip(number, why)
            continue
        events.append(event)
    return events


def event_problem(event: Any) -> str | None:
    """Why an event cannot be used, or None. The trial's config and result are checked when
    the trial is replayed, against the classes they become."""
    if not isinstance(event, dict):
        return f"not an event object ({type(event).__name__})"
    kind = event.get("event")
    if kind not in TRIAL_EVENTS + CAMPAIGN_EVENTS:
        return f"unknown event {excerpt(kind, 40)}"
    if not _in_range(event.get("time"), COMPUTED_RANGES["time"]):
        return f"{kind} event without a valid time"
    if kind in CAMPAIGN_EVENTS:
        return _campaign_event_problem(kind, event)
    return _trial_event_problem(kind, event)


# The campaign events' fields, and the types a reader relies on.
_CAMPAIGN_FIELDS = {"name": str, "spec_digest": str, "parent_run_id": str, "stop_reason": str,
                    "started_at": (int, float), "trials_stopped": int, "key": str}
# The numbers readers compute with (elapsed time, durations, GPU-hours), each bounded so that
# their sums and products stay finite: a time from 1970 to the year 5138, a world of up to
# 2^31 ranks, a simulated trial of up to 3,000 years. The measurements themselves are only
# shown and compared, and may be NaN (a diverged loss is data).
COMPUTED_RANGES = {"time": 1e11, "started_at": 1e11, "world_size": 2**31,
                   "simulated_duration_s": 1e11}
_COMPUTED_RESULT_FIELDS = ("world_size", "simulated_duration_s")


def _in_range(value: Any, highest: float) -> bool:
    """A number from 0 to `highest` (NaN is none)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and \
        0 <= value <= highest


def _campaign_event_problem(kind: str, event: dict[str, Any]) -> str | None:
    for name, kinds in _CAMPAIGN_FIELDS.items():
        value = event.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            return f"{kind} event whose {name} is {type(value).__name__}"
    started = event.get("started_at")
    if started is not None and not _in_range(started, COMPUTED_RANGES["started_at"]):
        return f"{kind} event whose started_at {excerpt(started, 24)} is no time"
    return None


def _computed_result_problem(trial_id: str, result: dict[str, Any]) -> str | None:
    """Why a result's world size or simulated duration (in it or in its `extra`) cannot be
    computed with, or None."""
    extra = result.get("extra")
    for where in (result, extra if isinstance(extra, dict) else {}):
        for name in _COMPUTED_RESULT_FIELDS:
            value, highest = where.get(name), COMPUTED_RANGES[name]
            if value is not None and not _in_range(value, highest):
                return (f"finished event of {trial_id} whose result {name} is "
                        f"{excerpt(value, 24)}, not a number from 0 to {highest:g}")
    return None


def _trial_event_problem(kind: str, event: dict[str, Any]) -> str | None:
    if not isinstance(event.get("trial_id"), str) or not event["trial_id"]:
        return f"{kind} event whose trial_id is not a name ({excerpt(event.get('trial_id'), 40)})"
    if not isinstance(event.get("config"), dict):
        return f"{kind} event of {event['trial_id']} without a config object"
    if event.get("fidelity", "full") not in FIDELITIES:
        return f"{kind} event of {event['trial_id']} with unknown phase " \
               f"{excerpt(event.get('fidelity'), 40)}"
    if "handle" in event and not isinstance(event["handle"], dict):
        return f"{kind} event of {event['trial_id']} whose handle is not an object"
    if kind == "finished" and not isinstance(event.get("result"), dict):
        return f"finished event of {event['trial_id']} without a result object"
    if kind == "finished":
        return _computed_result_problem(event["trial_id"], event["result"])
    if kind == "tracked" and not isinstance(event.get("run_id"), str):
        return f"tracked event of {event['trial_id']} without an MLflow run id"
    return None
