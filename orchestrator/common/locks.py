"""Exclusive locks that say who holds them: one controller per campaign
(`runs/<name>/controller.lock`), one service per state directory (server/state_lock.py).

The lock is an flock, so the kernel releases it when its holder dies, SIGKILL included: a
crashed holder never blocks its own restart. The file records the holder's PID and host, so a
second one is told who holds it; a holder that lets go clears the record.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable

from orchestrator.common.errors import CampaignStateError

LOCK_FILE = "controller.lock"


def _holder(fh) -> dict:
    fh.seek(0)
    try:
        holder = json.loads(fh.read() or "{}")
    except json.JSONDecodeError:
        return {}
    return holder if isinstance(holder, dict) else {}


class HolderLock:
    """An exclusive flock on `path` recording its holder; `refused(holder)` is the error a
    second taker gets (holder: the record's pid and host, or {})."""

    def __init__(self, path: Path, refused: Callable[[dict], Exception]):
        self.path = Path(path)
        self.refused = refused
        self._fh = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # not inherited by child processes (Python's default)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fh)
            fh.close()
            raise self.refused(holder) from None
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.time()}))
            fh.flush()
            os.fsync(fh.fileno())
        except OSError as exc:  # a full disk: let go of the file, say so in one line
            fh.close()
            raise CampaignStateError(f"{self.path}: cannot record the lock's holder "
                                     f"({exc.strerror or exc}); free space or fix "
                                     "permissions, then try again") from None
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            self._fh.truncate(0)  # no holder now: readers see it free
            self._fh.flush()
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "HolderLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class CampaignLock(HolderLock):
    def __init__(self, campaign_dir: Path, campaign: str):
        path = Path(campaign_dir) / LOCK_FILE
        super().__init__(path, lambda holder: CampaignStateError(
            f"campaign {campaign!r} is already run by PID {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')} (lock {path}); stop that controller first"))


def controller_alive(campaign_dir: Path) -> bool:
    """Whether the controller that last locked the campaign still runs, read from the lock
    file's record (probing the lock itself could make a controller starting at that instant
    fail to take it). A holder on another host cannot be checked and counts as alive."""
    try:
        with open(Path(campaign_dir) / LOCK_FILE) as fh:
            holder = _holder(fh)
    except OSError:
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
