"""One controller per campaign: an exclusive lock on `runs/<name>/controller.lock`.

The lock is an flock, so the kernel releases it when its holder dies, SIGKILL included: a
crashed controller never blocks its own resume. The file records the holder's PID and host,
so a second controller is told who holds the campaign.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from orchestrator.errors import CampaignStateError

LOCK_FILE = "controller.lock"


class CampaignLock:
    def __init__(self, campaign_dir: Path, campaign: str):
        self.path = Path(campaign_dir) / LOCK_FILE
        self.campaign = campaign
        self._fh = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            try:
                holder = json.loads(fh.read() or "{}")
            except json.JSONDecodeError:
                holder = {}
            fh.close()
            raise CampaignStateError(
                f"campaign {self.campaign!r} is already run by PID {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')} (lock {self.path}); stop that controller first"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": time.time()}))
        fh.flush()
        os.fsync(fh.fileno())
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            self._fh.truncate(0)  # no holder now: readers see the campaign stopped
            self._fh.flush()
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "CampaignLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def controller_alive(campaign_dir: Path) -> bool:
    """Whether the controller that last locked the campaign still runs, read from the lock
    file's record (probing the lock itself could make a controller starting at that instant
    fail to take it). A holder on another host cannot be checked and counts as alive."""
    try:
        holder = json.loads((Path(campaign_dir) / LOCK_FILE).read_text() or "{}")
    except (OSError, json.JSONDecodeError):
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
