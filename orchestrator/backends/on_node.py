"""Run one trial to its end on the machine this code runs on: the work a cluster backend ships
to a compute node (inside a Ray task or a Slurm job).

It launches the trial as the local backend does (torchrun in its own session, or the external
command), enforces the timeout, kills the whole process tree when interrupted (a cancelled Ray
task, a Slurm job sent SIGTERM), and returns the result as a dict, so it needs only the
standard library and the trial program on the node.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
import time
from typing import Any

from orchestrator.backends.base import TrialRequest, start_trial
from orchestrator.backends.peer_failure import PeerFailure
from orchestrator.common.bounded_files import UnreadableFile, read_bounded
from orchestrator.common.first_writer import write_once
from orchestrator.result import TrialResult
from orchestrator.trial.folder import TrialFolder
from orchestrator.trial.process import TrialProcess, rank_argv, trial_env


def _watch(process: TrialProcess, poll_s: float, peers: PeerFailure | None = None
           ) -> TrialResult:
    """Poll until the process ends; kill it on any exception (a cancel, a signal), or when
    another rank of its attempt failed (`peers`)."""
    try:
        while (result := process.poll()) is None:
            if peers is not None and peers.stop_now():
                process.kill()
                return peers.stopped()
            time.sleep(poll_s)
        return peers.settle(result, *process.ended()) if peers is not None else result
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


def shared_deadline(folder: TrialFolder, attempt: str, timeout_s: float) -> float:
    """The wall-clock time at which every task of one attempt at a trial stops: the first task
    to start sets it, the others read it. Were each task to time itself from its own start, the
    first one started would kill its ranks while a later task's ranks still wait on them in a
    collective, and those would end `failed` instead of `timeout`."""
    path = folder.deadline_file(attempt)
    if not path.exists():
        write_once(path, repr(time.time() + timeout_s))
    try:  # a trial's program may have left anything at that name
        return float(read_bounded(path, 64))
    except (UnreadableFile, ValueError):
        return time.time() + timeout_s


def run_on_node(request: TrialRequest, argv: list[str], rank: int, poll_s: float,
                attempt: str | None = None) -> TrialResult:
    """Run this task's part of a trial as a child in the task's process group (so the
    scheduler's stop reaches it), killed with its tree on any exception, timeout enforced:
    from a deadline all the attempt's tasks share where `attempt` names one (a trial of several
    tasks), else from this task's start.

    SIGUSR2, submitit's signal ahead of the time limit (sent only when a spec's `sbatch_args`
    ask Slurm for it: slurm.WARNING_SIGNAL), is ignored here and in the trial's processes (an
    ignored signal stays ignored across exec): a trial cannot be checkpointed, so submitit's
    handler would requeue it as preempted or end it early as failed, and the rank programs
    would die of the signal's default action. The limit itself is Slurm's
    to enforce (state TIMEOUT, status `timeout`)."""
    try:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    except ValueError:  # not the main thread (some Ray workers): no submitit handler there
        pass
    folder = request.folder
    env = trial_env(folder, request.trial_id, {**request.run.env, **request.env})
    deadline = shared_deadline(folder, attempt, request.timeout_s) if attempt else None
    process = TrialProcess(argv, folder=folder, env=env, timeout_s=request.timeout_s,
                           world_size=request.world_size, read_result=request.read_result,
                           cwd=request.workdir, rank=rank, own_session=False, deadline=deadline)
    peers = PeerFailure(request, attempt, rank) if attempt else None
    return _watch(process, poll_s, peers)




def run_rank_at(request: TrialRequest, rank: int, local: tuple[int, int],
                master: tuple[str, int], poll_s: float = 0.5) -> dict[str, Any] | None:
    """One rank of a `rank-env` trial placed by a scheduler that sets no rank variables (a Ray
    placement group): rank, (local rank, ranks on this node) and the rendezvous (rank 0's
    node and a port free there) come from the caller. The result comes back from rank 0."""
    world = request.world_size
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local[0]),
           "LOCAL_WORLD_SIZE": str(local[1]), "MASTER_ADDR": master[0],
           "MASTER_PORT": str(master[1])}
    placed = dataclasses.replace(request, env={**request.env, **env})
    request.folder.path.mkdir(parents=True, exist_ok=True)
    request.folder.note(f"rank {rank} of {world} on {socket.gethostname()} (local rank "
                        f"{local[0]} of {local[1]}), rendezvous at {master[0]}:{master[1]}", rank)
    result = run_on_node(placed, rank_argv(request.run), rank, poll_s,
                         attempt=f"{master[0]}-{master[1]}")
    return result.to_dict() if rank == 0 else None
