"""Build locks of torch's JIT extensions: a trial killed mid-build must not hang the next.

The builders here are real processes taking the lock with torch's own FileBaton, the way
torch.utils.cpp_extension does around a DeepSpeed op build."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.result import TrialResult
from orchestrator.trial.extension_locks import clear_abandoned_locks, extension_roots
from orchestrator.trial.folder import TrialFolder
from orchestrator.trial.process import TrialProcess

BUILDER = """
import sys, time
from torch.utils.file_baton import FileBaton
baton = FileBaton(sys.argv[1])
assert baton.try_acquire()
print("building", flush=True)
time.sleep(600)
"""

WAITER = """
import sys
from torch.utils.file_baton import FileBaton
FileBaton(sys.argv[1]).wait()
"""


def start_builder(lock: Path) -> subprocess.Popen:
    lock.parent.mkdir(parents=True, exist_ok=True)
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, str(lock)], stdout=subprocess.PIPE)
    assert builder.stdout.readline().strip() == b"building"
    return builder


def test_a_lock_left_by_a_killed_build_is_removed_and_a_held_one_kept(tmp_path):
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    abandoned, held = tmp_path / "ext" / "fused_adam" / "lock", tmp_path / "ext" / "shm" / "lock"
    killed = start_builder(abandoned)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    running = start_builder(held)
    try:
        assert abandoned.exists()
        assert clear_abandoned_locks(env) == [abandoned]
        assert not abandoned.exists() and held.exists()
    finally:
        running.kill()
        running.wait()


def test_the_default_root_is_torchs_user_cache(tmp_path):
    (tmp_path / "torch_extensions" / "py311_cpu").mkdir(parents=True)
    roots = extension_roots({"XDG_CACHE_HOME": str(tmp_path)})
    assert tmp_path / "torch_extensions" / "py311_cpu" in roots


def test_a_trial_after_a_killed_build_does_not_wait_for_it(tmp_path):
    """The trial waits on the build lock as torch does; it ends at once instead of at its
    timeout, and its log says which lock was removed."""
    ext = tmp_path / "ext"
    lock = ext / "fused_adam" / "lock"
    killed = start_builder(lock)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    folder = TrialFolder(tmp_path / "t0001")
    folder.prepare({})
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext)}
    trial = TrialProcess([sys.executable, "-c", WAITER, str(lock)], folder=folder, env=env,
                         timeout_s=600, world_size=1,
                         read_result=lambda code: TrialResult(status="ok" if code == 0 else "failed",
                                                              world_size=1))
    deadline = time.monotonic() + 300  # the waiter imports torch: slow on a busy machine
    while (result := trial.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if result is None:
        trial.kill()
    assert result is not None and result.status == "ok"
    assert f"removed the abandoned build lock {lock}" in folder.log_file.read_text()
