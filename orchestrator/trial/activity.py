"""What a running trial is doing (building, compiling, warm-up, timed steps), as its log says.

A trial program may write `paratune phase: TEXT` lines (the built-in trainer does, on rank 0);
the last one is the trial's activity, shown in the live view while it runs. A trial killed at
its timeout while compilers ran below it (a program building an op on first use, as DeepSpeed
does) gets that said in its log and its error, where its own log may be empty.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.common.bounded_files import UnreadableFile, read_tail
from orchestrator.common.processes import descendants
from orchestrator.result import PHASE_LINE

TAIL_BYTES = 64 * 1024  # a phase line is among the last lines; the log may be long
# Process names of compilers and build drivers a JIT build runs (torch.utils.cpp_extension).
COMPILERS = ("ninja", "cc1plus", "cc1", "c++", "g++", "gcc", "clang", "clang++", "nvcc",
             "cicc", "ptxas", "hipcc", "ld")


def last_activity(log_file: Path) -> str | None:
    """The text of the last phase line in the log, if any."""
    try:  # bounded, and never a FIFO or link the trial left at the log's name
        tail = read_tail(log_file, TAIL_BYTES).decode(errors="replace")
    except UnreadableFile:
        return None
    for line in reversed(tail.splitlines()):
        at = line.find(PHASE_LINE)
        if at >= 0:
            return line[at + len(PHASE_LINE):].strip()[:120] or None
    return None


def compilers_below(pid: int) -> list[str]:
    """The compilers running as a process or below it, by name, each once."""
    names: list[str] = []
    for child in [pid, *descendants(pid)]:
        try:
            name = Path(f"/proc/{child}/comm").read_text().strip()
        except OSError:
            continue
        if name in COMPILERS and name not in names:
            names.append(name)
    return names


def compiling_note(compilers: list[str]) -> str:
    """Why a trial that timed out while compiling took so long, and what to do."""
    return (f"it was compiling ({', '.join(compilers)} running): an op built on first use, "
            "such as DeepSpeed's JIT ops; build it once beforehand (DS_BUILD_OPS=1 pip install "
            "deepspeed, or one trial with a long timeout) or raise trial.timeout_s")
