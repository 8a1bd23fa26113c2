"""A campaign's controller as a child process of the service: `paratune run` on its first
start, `paratune resume` after, with its output appended to the campaign's service log.

The child runs in a session of its own (a Ctrl-C at the service's terminal must not cancel
trials) and is sent SIGTERM by the kernel if the service dies, SIGKILL included: the controller
then detaches, leaving its trials running and its campaign resumable (see ARCHITECTURE.md). A
controller that outlived a previous service is adopted by PID and start time.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.common.processes import is_running, start_time

PR_SET_PDEATHSIG = 1
CONTROL, CANCEL = "control", "cancel"  # what the child is for: run the campaign, or cancel it
GONE = object()  # an adopted controller ended; its exit status is not ours to read
# The line the service writes to a campaign's log before each controller it starts.
HEADER = re.compile(r"^--- \d{4}-\d\d-\d\d \d\d:\d\d:\d\d paratune ")


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ControllerProcess:
    def __init__(self, pid: int, started: int | None, popen: subprocess.Popen | None = None,
                 purpose: str = CONTROL):
        self.pid = pid
        self.purpose = purpose
        self.started = started
        self.popen = popen
        self.interrupted = False
        self.since = time.monotonic()  # started, or adopted: how long it has run (at least)

    @classmethod
    def launch(cls, argv: list[str], env: dict[str, str], log: Path, cwd: Path | str,
               purpose: str = CONTROL, run_as: Any = None) -> "ControllerProcess":
        """Start it (as `run_as`, an isolation.RunAs, when given), appending to `log`."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} paratune "
                      f"{' '.join(argv[3:])}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, cwd=cwd, start_new_session=True, preexec_fn=_die_with_parent,
                **(run_as.popen_options() if run_as else {}))
        return cls(popen.pid, start_time(popen.pid), popen, purpose)

    @classmethod
    def adopt(cls, pid: int | None, started: int | None) -> "ControllerProcess | None":
        """The controller a previous service started, if it still runs."""
        if pid and started is not None and is_running(pid, started):
            return cls(pid, started)
        return None

    def poll(self) -> int | object | None:
        """None while it runs; then its exit code, or GONE for an adopted one."""
        if self.popen is not None:
            return self.popen.poll()
        return None if is_running(self.pid, self.started) else GONE

    def signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def interrupt(self) -> None:
        """SIGINT: the controller cancels its running trials and exits."""
        self.interrupted = True
        self.signal(signal.SIGINT)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.poll() is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


def controller_argv(command: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", command, *args]


def how_it_ended(code: int) -> str:
    if code < 0:
        try:
            name = f" ({signal.Signals(-code).name})"
        except ValueError:
            name = ""
        return f"was killed by signal {-code}{name}"
    return f"exited with code {code}"


def last_line(log: Path) -> tuple[str, bool]:
    """The last line a controller wrote to the campaign's log ("" if none), and whether it came
    before the latest start. The service's own header lines are skipped: they say nothing
    about why a controller ended."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "", False
    earlier = False
    for line in reversed(lines):
        if HEADER.match(line):
            earlier = True
        elif line.strip():
            return line.strip(), earlier
    return "", False
