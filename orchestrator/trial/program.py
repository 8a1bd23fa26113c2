"""What one trial runs: the program a trainer adapter renders and the trial's process tree
starts. It sits with the trial, below the adapters, so the trial's process tree needs no
adapter (the adapters import it from here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# How a trial's ranks start:
# - "torchrun": one torchrun per node starts the node's ranks (rendezvous across nodes);
# - "rank-env": the program is one rank that reads RANK, WORLD_SIZE and MASTER_ADDR from its
#   environment, so a scheduler may start it once per rank (or torchrun once per node);
# - "self": the program starts its own ranks and is run once, as it is.
Launcher = Literal["torchrun", "rank-env", "self"]


@dataclass(frozen=True)
class TrainerRun:
    """What one trial runs: the program (a script path or `-m module`, with arguments) that the
    launcher starts, files to write into the trial folder first, and extra environment."""

    program: list[str]
    launcher: Launcher
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
