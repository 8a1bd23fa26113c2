"""Ray backend: each trial is one Ray task holding the CPUs or GPUs of its world size.

The task runs the trial as the local backend would (torchrun inside it, in its own process
group, timeout enforced there) on whichever node Ray places it, writing to the trial
directory, which must be on a filesystem the nodes share. `address` connects to a running
cluster (`auto`, `ray://host:10001`); without one, a local runtime is started and shut down by
this backend. Stopping a campaign cancels its tasks; a cancelled task kills its trial's
process tree. Ray tasks die with the driver, so on resume running trials are run again.
"""

from __future__ import annotations

from typing import Any

import ray

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.process_trial import run_trial_to_end
from orchestrator.backends.trial_process import kill_leftovers
from orchestrator.result import TrialResult
from orchestrator.trial_folder import TrialFolder

CANCEL_GRACE_S = 10.0


class RayHandle(TrialHandle):
    def __init__(self, ref, request: TrialRequest):
        self.ref = ref
        self.request = request

    def poll(self) -> TrialResult | None:
        ready, _ = ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            return TrialResult.from_dict(ray.get(self.ref))
        except Exception as exc:  # the task itself died (node lost, worker killed)
            return TrialResult(status="failed", error=f"Ray task failed: {type(exc).__name__}: {exc}"[:2000])

    def cancel(self) -> None:
        """A soft cancel raises KeyboardInterrupt in the task, which kills its trial's tree. A
        busy worker can miss it: then the worker is killed, and the ranks it started on this
        machine (in sessions of their own, so they outlive it) are found by their folder."""
        ray.cancel(self.ref, force=False)
        ended, _ = ray.wait([self.ref], timeout=CANCEL_GRACE_S)
        if not ended:
            ray.cancel(self.ref, force=True)
            kill_leftovers(self.request.folder)

    def info(self) -> dict[str, Any]:
        return {"ray_task": self.ref.hex()}


class RayBackend(Backend):
    def __init__(self, *, address: str | None = None, num_cpus: int | None = None,
                 gpus_per_trial_rank: float = 0.0, temp_dir: str | None = None):
        self.gpus_per_rank = gpus_per_trial_rank
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
            ray.init(**kwargs)
            self.started_runtime = not address
        self._remote = ray.remote(max_retries=0)(run_trial_to_end)

    def submit(self, request: TrialRequest) -> RayHandle:
        resources = {"num_cpus": request.world_size if not self.gpus_per_rank else 1,
                     "num_gpus": request.world_size * self.gpus_per_rank}
        ref = self._remote.options(**resources).remote(request)
        return RayHandle(ref, request)

    def cleanup(self, info: dict[str, Any], folder: TrialFolder) -> None:
        """A task of a previous driver died with it; end any rank it left on this node."""
        kill_leftovers(folder)

    def shutdown(self) -> None:
        """Stop the local runtime this backend started (never one it connected to)."""
        if self.started_runtime and ray.is_initialized():
            ray.shutdown()
            self.started_runtime = False
