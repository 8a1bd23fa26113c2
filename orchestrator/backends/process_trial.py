"""Run one trial to its end on the machine this code runs on: the work a cluster backend ships
to a compute node (inside a Ray task or a Slurm job).

It launches the trial as the local backend does (torchrun in its own session, or the external
command), enforces the timeout, kills the whole process tree when interrupted (a cancelled Ray
task, a Slurm job sent SIGTERM), and returns the result as a dict, so it needs only the
standard library and the trial program on the node.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from submitit.helpers import TorchDistributedEnvironment

from orchestrator.backends.base import TrialRequest
from orchestrator.backends.local import start_trial
from orchestrator.backends.trial_process import TrialProcess, builtin_job_argv, trial_env


def _watch(process: TrialProcess, poll_s: float) -> Any:
    """Poll until the process ends; kill it on any exception (a cancel, a signal)."""
    try:
        while (result := process.poll()) is None:
            time.sleep(poll_s)
        return result
    except BaseException:
        process.kill()
        raise


def run_trial_to_end(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any]:
    process = start_trial(request)
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):  # noqa: ANN001 - signal handler signature
        process.kill()
        raise KeyboardInterrupt(f"trial {request.trial_id} stopped by signal {signum}")

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (some Ray workers): rely on KeyboardInterrupt
        previous = None
    try:
        return _watch(process, poll_s).to_dict()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_rank(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any] | None:
    """One rank of a trial launched as one task per rank (srun): read rank, world and
    rendezvous from the scheduler (submitit's TorchDistributedEnvironment), run the job as a
    child (killed with its tree when the scheduler stops this task), enforce the timeout, and
    return the result from rank 0 (None on the other ranks)."""
    rank = TorchDistributedEnvironment().export(set_cuda_visible_devices=False).rank
    folder = request.folder
    argv = list(request.command) if request.command else builtin_job_argv(folder, None)
    process = TrialProcess(argv, folder=folder, env=trial_env(folder, request.trial_id, request.env),
                           timeout_s=request.timeout_s, world_size=request.world_size,
                           cwd=request.workdir, rank=rank, own_session=False)
    result = _watch(process, poll_s)
    return result.to_dict() if rank == 0 else None
