"""Loopback ports for the servers the tests start, chosen above the kernel's ephemeral range
(61000-65535 with Linux's default range): no outgoing connection and no socket bound to port 0
(a trial's collectives among them) gets one there, and neither do Ray's worker ports
(10002-19999) nor the rendezvous ports of Slurm trials (20000 up to the ephemeral range,
orchestrator/backends/slurm_tasks.py). Another test choosing the same way still may, before
the server binds it: the server then exits saying so, and `start_on_a_free_port` tries
another."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

TAKEN = "address already in use"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _above_ephemeral() -> range:
    """The ports above the ephemeral range; empty where it leaves fewer than 1000 (then the
    kernel picks, from the ephemeral range)."""
    last = int(EPHEMERAL_RANGE.read_text().split()[1]) if EPHEMERAL_RANGE.exists() else 60999
    return range(last + 1, 65536) if last < 64535 else range(0)


CHOSEN_FROM = _above_ephemeral()


def free_port() -> int:
    """A loopback port in CHOSEN_FROM that nothing is bound to now."""
    for _ in range(200):
        port = random.choice(CHOSEN_FROM) if CHOSEN_FROM else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise AssertionError(f"no free port in {CHOSEN_FROM}")


def start_on_a_free_port(launch: Callable[[int], subprocess.Popen], answers: Callable[[int], bool],
                         log: Path, timeout_s: float = 60, tries: int = 5
                         ) -> tuple[subprocess.Popen, int]:
    """(process, port) once `answers(port)`; `launch(port)` starts the server with its output
    appended to `log`. A try whose server exits for a taken port is followed by another;
    exiting for any other reason, or not answering in `timeout_s`, fails the test."""
    for _ in range(tries):
        port = free_port()
        marker = f"-- starting on port {port}\n"
        with open(log, "a") as out:
            out.write(marker)
        process = launch(port)
        deadline = time.monotonic() + timeout_s
        while process.poll() is None:
            if answers(port):
                return process, port
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise AssertionError(f"the server did not answer in {timeout_s:g} s: "
                                     + log.read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        this_try = log.read_text(errors="replace").rsplit(marker, 1)[-1]
        assert TAKEN in this_try.lower(), this_try[-3000:]
    raise AssertionError(f"no free port in {tries} tries: {log.read_text(errors='replace')[-3000:]}")
