"""Run one trial to its end in the current process's machine: the work a cluster backend ships
to a compute node (inside a Ray task or a Slurm job).

It launches the trial as the local backend does (torchrun in its own process group, or the
external command), enforces the timeout itself, kills the whole process tree when interrupted
(a cancelled Ray task, a Slurm job sent SIGTERM), and returns the result as a dict, so it needs
only the standard library and the trial program on the node.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from orchestrator.backends.base import TrialRequest
from orchestrator.backends.local import LocalBackend


def run_trial_to_end(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any]:
    handle = LocalBackend().submit(request)
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):  # noqa: ANN001 - signal handler signature
        handle.cancel()
        raise KeyboardInterrupt(f"trial {request.trial_id} stopped by signal {signum}")

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (some Ray workers): rely on KeyboardInterrupt
        previous = None
    try:
        while (result := handle.poll()) is None:
            time.sleep(poll_s)
        return result.to_dict()
    except BaseException:
        handle.cancel()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_rank(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any] | None:
    """One rank of a trial launched as one task per rank (srun): read rank, world and
    rendezvous from the scheduler (submitit's TorchDistributedEnvironment), run the job as a
    child in this task's process group (so the scheduler's kill reaches it), enforce the
    timeout, and return the result from rank 0 (None on the other ranks)."""
    import os
    import subprocess
    import sys

    from submitit.helpers import TorchDistributedEnvironment

    from orchestrator.backends.local import LOG_FILE, SETTINGS_FILE, kill_tree, read_result

    dist_env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    trial_dir = request.trial_dir
    argv = list(request.command) if request.command else [
        sys.executable, "-m", "jobs.train", "--config", str(trial_dir / SETTINGS_FILE)]
    env = {**os.environ, "PARATUNE_RESULT_FILE": str(trial_dir / "result.json"),
           "PYTHONUNBUFFERED": "1", **request.env}
    log = open(trial_dir / f"rank{dist_env.rank}.log" if dist_env.rank else trial_dir / LOG_FILE, "ab")
    child = subprocess.Popen(argv, cwd=request.workdir or trial_dir, env=env,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        while child.poll() is None:
            if time.monotonic() - started > request.timeout_s:
                kill_tree(child.pid)
                child.wait()
                return {"status": "timeout", "world_size": request.world_size,
                        "error": f"killed after trial.timeout_s={request.timeout_s:g}s"} \
                    if dist_env.rank == 0 else None
            time.sleep(poll_s)
    except BaseException:
        kill_tree(child.pid)
        raise
    finally:
        log.close()
    return read_result(trial_dir, child.returncode).to_dict() if dist_env.rank == 0 else None
