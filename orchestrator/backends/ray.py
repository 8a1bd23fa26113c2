"""Ray backend: each trial is run by a detached, named Ray actor (ray_runner.py) that submits
the trial's tasks and holds its result, so trials outlive the controller.

A trial that fits on a node is one task holding the CPUs or GPUs of its world size, running the
trial as the local backend would (torchrun in its own process group, timeout enforced there).
A `rank-env` trial (the built-in job) larger than `ranks_per_node` (the spec's gpus_per_node)
is placed with a placement group of one bundle per node and runs as one task per rank, with
gloo or NCCL meeting at bundle 0's node. Trials write to their folder, which must be on a
filesystem the nodes share.

`address` connects to a running cluster (`auto`, `ray://host:10001`); without one, a local
runtime is started and shut down by this backend (its trials die with it and run again on
resume). The actor is named after the campaign folder and trial, in the Ray namespace
`paratune`; the journal keeps that name, and a resumed controller re-attaches to the actor
if it is still there (running, or holding the result of a trial that ended unwatched), else
the trial runs again. The actor is killed once its result is read or the trial is cancelled;
a cancel stops the tasks and sweeps every node for processes that outlived their worker.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import ray

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.ray_runner import CANCEL_GRACE_S, NAMESPACE, TrialRunner
from orchestrator.result import TrialResult
from orchestrator.trial.folder import TrialFolder
from orchestrator.trial.process import kill_leftovers

# Threads: `cancel` and each controller's `result` wait (a killed one's stays until the end).
_Runner = ray.remote(num_cpus=0, max_concurrency=16, max_restarts=0)(TrialRunner)


def actor_name(folder: TrialFolder, trial_id: str) -> str:
    """Unique per campaign folder and trial: `<campaign>/<trial>/<digest of the folder path>`."""
    path = folder.path.resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return f"{path.parent.parent.name}/{trial_id}/{digest}"


def _find(name: str, namespace: str = NAMESPACE):
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:  # no such actor (ended, killed, or another runtime)
        return None


def _stop_actor(actor, result_ref=None) -> None:
    """Cancel what the actor started, then kill it (which frees its name). With the `result`
    call a handle waits on, the kill waits until that call has answered (the cancelled
    outcome), as a kill racing the answer turns it into "actor died"."""
    try:
        ray.get(actor.cancel.remote(), timeout=4 * CANCEL_GRACE_S)
    except Exception:  # noqa: BLE001 - the actor may be dead already; kill it regardless
        pass
    if result_ref is not None:
        ray.wait([result_ref], timeout=CANCEL_GRACE_S)
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001
        pass


def _connect(kwargs: dict[str, Any], attempts: int = 3) -> None:
    """ray.init, tried again when a Ray client server fails to start this client's own server
    (ConnectionAbortedError "Initialization failure from server", seen with Ray 2.60 right after
    another client left): a failure of that attempt, not of the cluster."""
    for attempt in range(attempts):
        try:
            ray.init(**kwargs)
            return
        except ConnectionAbortedError:
            if attempt == attempts - 1:
                raise
            ray.shutdown()
            time.sleep(2.0)


class RayHandle(TrialHandle):
    def __init__(self, actor, name: str, request: TrialRequest):
        self.actor, self.name, self.request = actor, name, request
        self.ref = actor.result.remote()

    def poll(self) -> TrialResult | None:
        ready, _ = ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            result = TrialResult.from_dict(ray.get(self.ref))
        except Exception as exc:  # the actor itself died (its node lost, killed)
            result = TrialResult(status="failed", world_size=self.request.world_size,
                                 error=f"Ray trial actor failed: {type(exc).__name__}: {exc}"[:2000])
        try:
            ray.kill(self.actor, no_restart=True)  # the result is read: release the name
        except Exception:  # noqa: BLE001
            pass
        return result

    def cancel(self) -> None:
        _stop_actor(self.actor, self.ref)
        kill_leftovers(self.request.folder)  # on this node too, should the sweep have missed it

    def info(self) -> dict[str, Any]:
        return {"ray_actor": self.name, "ray_namespace": NAMESPACE}


class RayBackend(Backend):
    def __init__(self, *, address: str | None = None, num_cpus: int | None = None,
                 gpus_per_trial_rank: float = 0.0, temp_dir: str | None = None,
                 ranks_per_node: int | None = None):
        self.gpus_per_rank = gpus_per_trial_rank
        self.ranks_per_node = ranks_per_node
        self.started_runtime = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address:
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = num_cpus
                if temp_dir:
                    kwargs["_temp_dir"] = temp_dir
            _connect(kwargs)
            self.started_runtime = not address

    def submit(self, request: TrialRequest) -> RayHandle:
        request.prepare()
        name = actor_name(request.folder, request.trial_id)
        if (stale := _find(name)) is not None:  # an earlier attempt's, never collected
            _stop_actor(stale)
        actor = _Runner.options(name=name, namespace=NAMESPACE, lifetime="detached").remote(
            request, self.ranks_per_node, self.gpus_per_rank)
        return RayHandle(actor, name, request)

    def reattach(self, info: dict[str, Any], request: TrialRequest) -> RayHandle | None:
        """The trial's actor, if it is still there: running, or holding the result of a trial
        that ended while no controller watched. Journals of earlier releases (`ray_task`) name
        no actor: their trials run again."""
        name = info.get("ray_actor")
        actor = _find(name, info.get("ray_namespace", NAMESPACE)) if name else None
        return RayHandle(actor, name, request) if actor is not None else None

    def cleanup(self, info: dict[str, Any], folder: TrialFolder) -> None:
        """A trial that runs again: stop its actor if one is left, and its ranks on this node."""
        if info.get("ray_actor") and (actor := _find(info["ray_actor"],
                                                     info.get("ray_namespace", NAMESPACE))):
            _stop_actor(actor)
        kill_leftovers(folder)

    def shutdown(self) -> None:
        """Stop the local runtime this backend started (never one it connected to)."""
        if self.started_runtime and ray.is_initialized():
            ray.shutdown()
            self.started_runtime = False
