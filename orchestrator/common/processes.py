"""Processes on Linux, named for good by PID and kernel start time (PIDs are recycled), and
process trees found through /proc and killed whole. Shared by the backends, which run trials,
and by the service, which runs controllers."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state letter) on; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces


def parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (stat field 22): with the PID, what names
    one process for good, since PIDs are recycled."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def is_running(pid: int, started: int) -> bool:
    """Whether the process `pid` that started at `started` still runs (a zombie has ended)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == started


def live_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`."""
    children: dict[int, list[int]] = {}
    for child in live_pids():
        parent = parent_of(child)
        if parent is not None:
            children.setdefault(parent, []).append(child)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL a trial's launcher, its process group and every process below it."""
    below = descendants(pid)  # before the kill: orphans lose their parent link
    for target in [pid, *below]:
        for kill in (os.killpg, os.kill):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


PR_SET_DUMPABLE = 4


def keep_from_same_user_processes() -> None:
    """Make this process non-dumpable: other processes of the same OS user (its own trials
    among them) can then neither read its /proc environment and memory nor attach to it;
    the kernel resets it for the programs it starts."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
