"""One trial as a process tree on this machine: started in its own session, timed out, and
killed whole. Shared by the local backend and by the code a cluster backend runs on a node.

torchrun starts its ranks in sessions of their own, so a process group alone does not reach
them: everything below the launcher is found through /proc and killed with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.common.processes import descendants, kill_tree, live_pids
from orchestrator.result import TrialResult
from orchestrator.trial.program import TrainerRun
from orchestrator.trial.activity import compilers_below, compiling_note
from orchestrator.trial.extension_locks import clear_abandoned_locks
from orchestrator.trial.folder import TrialFolder, open_for_append

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _names(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def kill_leftovers(folder: TrialFolder, pid: int | None = None) -> None:
    """End what is left of a trial whose controller died: its recorded launcher and the
    processes below it, and ranks orphaned by the launcher's death (their parent link is gone,
    so they are found by the trial folder in their command line). Every process killed must
    name the trial folder, since PIDs are recycled."""
    marker = str(folder.path).encode()
    suspects = set(descendants(pid)) | {pid} if pid else set()
    suspects |= {p for p in live_pids() if _names(p, marker)}
    for target in suspects:
        if _names(target, marker):
            kill_tree(target)


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def local_argv(run: TrainerRun, world_size: int) -> list[str]:
    """The trial's command on one machine: torchrun --standalone for all its ranks, or the
    program itself when it starts its own."""
    if run.launcher == "self":
        return list(run.program)
    return [*TORCHRUN, "--standalone", f"--nproc_per_node={world_size}", *run.program]


def rank_argv(run: TrainerRun) -> list[str]:
    """One rank of a `rank-env` program, started by a scheduler that sets its rank."""
    return [sys.executable, *run.program]


def node_argv(run: TrainerRun, *, nodes: int, node_rank: int, per_node: int, master: str,
              port: int, rendezvous_id: str) -> list[str]:
    """torchrun for this node's ranks, meeting the other nodes' torchruns at `master:port`."""
    return [*TORCHRUN, f"--nnodes={nodes}", f"--node_rank={node_rank}",
            f"--nproc_per_node={per_node}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={master}:{port}", f"--rdzv_id={rendezvous_id}", *run.program]


# A service's credentials: the slot token and URL it gives a controller, its database URL.
# Trial programs are the user's code and get none of them.
SERVICE_SECRETS = ("PARATUNE_SLOTS_URL", "PARATUNE_SLOTS_TOKEN", "PARATUNE_DATABASE_URL")


def trial_env(folder: TrialFolder, trial_id: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment every trial program gets: the controller's, less a service's
    credentials; the spec's `trial.env` comes last and wins."""
    return {
        **{k: v for k, v in os.environ.items() if k not in SERVICE_SECRETS},
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
        "PARATUNE_RESULT_FILE": str(folder.result_file),
        "PARATUNE_TRIAL_ID": trial_id,
        **extra,
    }


def timeout_result(timeout_s: float, world_size: int, compilers: list[str] = ()) -> TrialResult:
    why = compiling_note(compilers) if compilers else "raise it if the trial needs longer"
    return TrialResult(status="timeout", world_size=world_size,
                       error=f"killed after trial.timeout_s={timeout_s:g}s; {why}")


class TrialProcess:
    """A started trial program: `poll()` gives its result once it ends or outlives the timeout.
    `own_session=False` keeps it in the caller's process group, where a scheduler that stops a
    task by its group (srun) reaches it. `deadline` (wall-clock seconds), where given, replaces
    the timeout counted from this process's start: one trial's tasks on several nodes share it."""

    def __init__(self, argv: list[str], *, folder: TrialFolder, env: dict[str, str],
                 timeout_s: float, world_size: int, read_result: Callable[[int | None], TrialResult],
                 cwd: str | None = None, rank: int = 0, own_session: bool = True,
                 deadline: float | None = None):
        self.folder = folder
        self.deadline = deadline
        self.read_result = read_result
        self.timeout_s = timeout_s
        self.world_size = world_size
        with open_for_append(folder.rank_log(rank)) as log:
            for lock in clear_abandoned_locks(env):
                log.write(f"paratune: removed the abandoned build lock {lock}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                argv, cwd=cwd or folder.path, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=own_session,
            )
        self.started = time.monotonic()
        self._ended: tuple[int | None, bool] | None = None  # (return code, timed out)
        self.compilers: list[str] = []  # what was compiling when the timeout came

    @property
    def pid(self) -> int:
        return self.process.pid

    def ended(self) -> tuple[int | None, bool] | None:
        """None while it runs; else (return code, whether it was killed at the timeout)."""
        if self._ended is not None:
            return self._ended
        returncode = self.process.poll()
        out_of_time = self._out_of_time()
        if returncode is None and not out_of_time:
            return None
        if returncode is None:
            self._note_compilers()
        kill_tree(self.pid)  # the timeout, or ranks that outlived their launcher
        self.process.wait()
        # Past a shared deadline the other tasks kill their ranks, so a rank that fails then
        # has lost a peer to the timeout rather than failed on its own.
        peer_timed_out = returncode != 0 and self.deadline is not None and out_of_time
        self._ended = (returncode, returncode is None or peer_timed_out)
        return self._ended

    def _out_of_time(self) -> bool:
        if self.deadline is not None:
            return time.time() > self.deadline
        return time.monotonic() - self.started > self.timeout_s

    def poll(self) -> TrialResult | None:
        ended = self.ended()
        if ended is None:
            return None
        returncode, timed_out = ended
        if timed_out:
            return timeout_result(self.timeout_s, self.world_size, self.compilers)
        return self.read_result(returncode)

    def _note_compilers(self) -> None:
        """At the timeout: say in the trial log what was compiling, if anything was."""
        self.compilers = compilers_below(self.pid)
        if self.compilers:
            self.folder.note(f"trial.timeout_s={self.timeout_s:g}s passed; "
                             f"{compiling_note(self.compilers)}")

    def kill(self) -> None:
        kill_tree(self.pid)
        self.process.wait()
