"""Abandoned build locks of PyTorch's JIT extensions, cleared before a trial starts.

DeepSpeed builds its ops (fused Adam, the CPU shared-memory collectives) on first use with
torch.utils.cpp_extension, which guards each build folder with a `lock` file (FileBaton) and
waits, without end, for that file to go away. A trial killed mid-build (its timeout, a
cancel) leaves the file behind, and every later trial on the machine then hangs until its own
timeout. The builder keeps the lock file open for the whole build, so a lock no process here
has open is abandoned, unless the folder is on a shared filesystem, where the builder may be
another node: there, only a lock older than any build is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from orchestrator.common.processes import live_pids

SHARED_FILESYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "ceph",
                      "fuse.", "9p", "wekafs")
SHARED_LOCK_AGE_S = 1800.0  # far longer than any op build


def extension_roots(env: Mapping[str, str]) -> list[Path]:
    """Where torch builds extensions for a process with environment `env`."""
    if env.get("TORCH_EXTENSIONS_DIR"):
        return [Path(env["TORCH_EXTENSIONS_DIR"])]
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or str(Path.home()), ".cache")
    root = Path(cache) / "torch_extensions"
    return [root, *sorted(p for p in root.glob("py*") if p.is_dir())] if root.is_dir() else []


def build_locks(roots: list[Path]) -> list[Path]:
    return [lock for root in roots for lock in sorted(root.glob("*/lock")) if lock.is_file()]


def open_paths() -> set[str]:
    """Every file some process on this machine has open (those /proc lets us read)."""
    found: set[str] = set()
    for pid in live_pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
    return found


def filesystem_type(path: Path) -> str:
    """The type of the mount holding `path`, from /proc/self/mounts (longest mount point)."""
    target, best, kind = str(path.resolve()), -1, ""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), fields[2]
    return kind


def is_shared(path: Path) -> bool:
    kind = filesystem_type(path)
    return any(kind == name or kind.startswith(name) for name in SHARED_FILESYSTEMS)


def clear_abandoned_locks(env: Mapping[str, str], now: float | None = None) -> list[Path]:
    """Remove the build locks that no build holds; returns the ones removed."""
    locks = build_locks(extension_roots(env))
    if not locks:
        return []
    held = open_paths()
    now = time.time() if now is None else now
    removed = []
    for lock in locks:
        if str(lock.resolve()) in held:
            continue
        try:
            age = now - lock.stat().st_mtime
            if is_shared(lock) and age < SHARED_LOCK_AGE_S:
                continue
            lock.unlink()
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(lock)
    return removed
