"""What a Ray trial runs on the cluster: one detached, named actor per trial that owns the
trial's tasks and keeps its result.

Ray fate-shares a task with its owner, the process that submitted it: a task submitted by the
controller dies with the controller. A detached actor belongs to no driver, so the tasks it
submits outlive a controller killed with SIGKILL, and a resumed controller finds the actor again
by its name (ray.py). The actor asks for no CPU itself; its tasks hold the trial's resources:
  - a trial that fits on one node: one task running the trial as the local backend would
    (torchrun in its own session, timeout enforced there), as before;
  - a `rank-env` trial larger than a node: a placement group of one bundle per node
    (`ranks_per_node` ranks each, SPREAD), one task per rank in its node's bundle, meeting at
    bundle 0's node on a port a first task finds free there.
The actor is threaded, so `cancel` reaches it while `result` waits for the trial's end.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import ray
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from orchestrator.backends.base import TrialRequest
from orchestrator.backends.on_node import run_rank_at, run_trial_to_end
from orchestrator.trial.folder import TrialFolder
from orchestrator.trial.process import kill_leftovers

NAMESPACE = "paratune"
CANCEL_GRACE_S = 10.0


def _free_port_here() -> tuple[str, int]:
    """This node's address and a port free on it: rank 0's side of the rendezvous."""
    address = ray.util.get_node_ip_address()
    with socket.socket() as sock:
        sock.bind((address, 0))
        return address, sock.getsockname()[1]


def _sweep(folder: TrialFolder) -> None:
    """End the trial's processes on this node that outlived their Ray worker (torchrun and
    the ranks run in sessions of their own); only processes naming the trial folder."""
    kill_leftovers(folder)


def _failed(error: str, world_size: int) -> dict[str, Any]:
    return {"status": "failed", "error": error[:2000], "world_size": world_size}


def local_ranks(bundle_nodes: list[str], per_node: int, world: int) -> list[tuple[int, int]]:
    """(local rank, ranks on that node) for each rank, rank r in bundle r // per_node; two
    bundles placed on one node count as one node."""
    nodes = [bundle_nodes[r // per_node] for r in range(world)]
    return [(nodes[:r].count(nodes[r]), nodes.count(nodes[r])) for r in range(world)]


class TrialRunner:
    """Created detached by the backend; `result()` returns the trial's result dict once it
    ends (to any number of callers), `cancel()` stops it and what it started on every node."""

    def __init__(self, request: TrialRequest, ranks_per_node: int | None, gpus_per_rank: float):
        self.request = request
        self.per_node = ranks_per_node
        self.gpus = gpus_per_rank
        self.refs: list = []
        self.pg = None
        self.cancelled = False
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.outcome: dict[str, Any] | None = None
        threading.Thread(target=self._run, daemon=True).start()

    def gang(self) -> bool:
        r = self.request
        return bool(self.per_node) and r.world_size > self.per_node and r.run.launcher == "rank-env"

    def _run(self) -> None:
        try:
            self.outcome = self._run_gang() if self.gang() else self._run_single()
        except Exception as exc:  # a task died (node lost, worker killed, cancelled)
            self.outcome = _failed(f"Ray task failed: {type(exc).__name__}: {exc}",
                                   self.request.world_size)
        finally:
            try:
                if self.pg is not None:
                    ray.util.remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001 - it goes with the actor anyway; the result must out
                pass
            self.done.set()

    def _run_single(self) -> dict[str, Any]:
        r = self.request
        task = ray.remote(max_retries=0)(run_trial_to_end).options(
            num_cpus=r.world_size if not self.gpus else 1, num_gpus=r.world_size * self.gpus)
        with self.lock:
            if self.cancelled:
                return _failed("cancelled before it started", r.world_size)
            self.refs = [task.remote(r)]
        return ray.get(self.refs[0])

    def _run_gang(self) -> dict[str, Any]:
        r, per_node = self.request, self.per_node
        nodes = -(-r.world_size // per_node)
        bundle = {"CPU": float(per_node)} if not self.gpus else {"GPU": per_node * self.gpus}
        self.pg = ray.util.placement_group([dict(bundle) for _ in range(nodes)], strategy="SPREAD")
        ready, waited = self.pg.ready(), 0.0
        while not ray.wait([ready], timeout=1.0)[0]:
            waited += 1.0
            if self.cancelled or waited > r.timeout_s:
                return _failed(f"no placement for {nodes} nodes of {bundle} after {waited:g}s"
                               + (" (cancelled)" if self.cancelled else ""), r.world_size)
        table = ray.util.placement_group_table(self.pg)["bundles_to_node_id"]
        local = local_ranks([table[i] for i in range(nodes)], per_node, r.world_size)

        def at(index: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=index)

        master = ray.get(ray.remote(max_retries=0)(_free_port_here).options(
            num_cpus=0, scheduling_strategy=at(0)).remote())
        rank_task = ray.remote(max_retries=0)(run_rank_at)
        with self.lock:
            if self.cancelled:
                return _failed("cancelled before it started", r.world_size)
            self.refs = [rank_task.options(
                num_cpus=0 if self.gpus else 1, num_gpus=self.gpus,
                scheduling_strategy=at(rank // per_node)).remote(r, rank, local[rank], master)
                for rank in range(r.world_size)]
        try:
            outcome = ray.get(self.refs[0])
        except Exception:
            self._stop(self.refs[1:])
            raise
        rest = self.refs[1:]
        _, running = ray.wait(rest, num_returns=len(rest), timeout=CANCEL_GRACE_S)
        if running:  # rank 0 ended; the others had their grace
            self._stop(running)
        return outcome

    def _stop(self, refs: list) -> None:
        """Soft cancel (KeyboardInterrupt kills the trial's tree), then force for tasks that
        missed it, then a sweep of every node for processes that outlived their worker."""
        for ref in refs:
            ray.cancel(ref, force=False)
        _, running = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S) if refs else ([], [])
        for ref in running:
            ray.cancel(ref, force=True)
        sweep = ray.remote(max_retries=0)(_sweep)
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        try:
            ray.get([sweep.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node, soft=False)).remote(self.request.folder) for node in nodes], timeout=60)
        except Exception:  # noqa: BLE001 - a node lost meanwhile: its processes went with it
            pass

    def result(self) -> dict[str, Any]:
        self.done.wait()
        return self.outcome or _failed("no result", self.request.world_size)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            refs = list(self.refs)
        self._stop(refs)
        self.done.wait(timeout=CANCEL_GRACE_S)
