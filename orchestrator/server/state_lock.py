"""One service per state directory: an exclusive lock on `STATE_DIR/server.lock`.

Two services on one state directory would both adopt the same controllers and stop them when
either ends, so the second one must stop before it touches anything (orchestrator/common/locks.py:
released by the kernel when its holder dies, naming the holder to a second taker).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.common.errors import UserError
from orchestrator.common.locks import HolderLock

LOCK_FILE = "server.lock"


class StateDirLock(HolderLock):
    def __init__(self, state_dir: Path):
        path = Path(state_dir) / LOCK_FILE
        super().__init__(path, lambda holder: UserError(
            f"--state-dir {path.parent}: another paratune server (PID {holder.get('pid', '?')} "
            f"on {holder.get('host', '?')}) uses it (lock {path}); stop that server first, or "
            "give this one another --state-dir"))
