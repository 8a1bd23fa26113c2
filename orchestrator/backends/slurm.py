"""Slurm backend through submitit: one Slurm job per trial, one task per rank.

A trial asks for ceil(world / gpus_per_node) nodes. A trainer that is one rank (the built-in
job) gets a task per rank, each reading its rank and rendezvous from the allocation (submitit's
TorchDistributedEnvironment); a torchrun-launched trainer gets a task per node, each running
torchrun with a c10d rendezvous on the allocation's first host (slurm_tasks.py). Several trials
submitted together go out as a job array limited to `array_parallelism` running at once. The sbatch script submitit writes
stays in the trial's `slurm/` folder with its logs.

Slurm states become statuses: TIMEOUT -> timeout, OUT_OF_MEMORY -> oom, NODE_FAIL and
PREEMPTED -> the trial is submitted again up to `max_requeues` times, then failed (jobs go out
with --no-requeue, so Slurm's own requeue does not hide a node failure from that count). A job
that failed after the trial wrote its result keeps that result (e.g. oom from the job itself),
unless Slurm ended it (time limit, node failure, preemption). Slurm's warning ahead of the
limit is SIGURG (`WARNING_SIGNAL`), not the SIGUSR2 submitit asks for: its default action is
to do nothing, so it cannot kill a task that has not yet set a handler, nor make submitit's
handler end a trial that cannot be checkpointed; the limit ends a job as TIMEOUT. A cancelled trial is never submitted again, whatever state Slurm reports while it
ends the job.
States come from submitit's watcher, which on its own backs off to one sacct call every ten
minutes (half the time since the last submission); a handle forces a call at most every
`STATE_REFRESH_S`, so a trial's end is seen within seconds and its nodes do not sit idle.
On resume, a trial whose Slurm job still runs is re-attached by its job ID.
"""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path
from typing import Any

import submitit

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.slurm_tasks import run_node, run_once, run_rank
from orchestrator.result import TrialResult
from orchestrator.trial.folder import TrialFolder

# Sent by Slurm 90 s before the limit (submitit's delay); ignored by default everywhere.
WARNING_SIGNAL = "URG@90"
ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED",
          "RESIZING", "UNKNOWN", "READY"}
RETRYABLE = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}
STATUS_OF = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom"}
STATE_REFRESH_S = 5.0


def task_of(request: TrialRequest):
    """What each Slurm task runs: one rank (`rank-env` trainers, a task per rank), one node's
    torchrun (`torchrun` trainers, a task per node), or the program once (`self`)."""
    return {"rank-env": run_rank, "torchrun": run_node, "self": run_once}[request.run.launcher]


def tasks_per_node(request: TrialRequest, nodes: int) -> int:
    return math.ceil(request.world_size / nodes) if request.run.launcher == "rank-env" else 1


def _keep_sbatch_script(folder: Path, job_id: str, request: TrialRequest) -> None:
    """Copy the script submitit gave sbatch next to the trial's other artifacts."""
    array_id = str(job_id).split("_")[0]
    script = folder / array_id / f"{array_id}_submission.sh"
    if script.exists():
        request.folder.sbatch_script.write_text(script.read_text())


class SlurmHandle(TrialHandle):
    _last_refresh = float("-inf")  # one for all handles: the watcher asks for every job at once

    def __init__(self, backend: "SlurmBackend", request: TrialRequest, job, requeues: int = 0):
        self.backend = backend
        self.request = request
        self.job = job
        self.requeues = requeues
        self.cancelled = False  # a cancelled trial is never submitted again

    @classmethod
    def _refresh_mode(cls) -> str:
        now = time.monotonic()
        if now - cls._last_refresh < STATE_REFRESH_S:
            return "standard"
        cls._last_refresh = now
        return "force"

    def poll(self) -> TrialResult | None:
        self.job.get_info(mode=self._refresh_mode())
        state = self.job.state.split()[0].rstrip("+") if self.job.state else "UNKNOWN"
        if state in ACTIVE:
            return None
        if state == "COMPLETED":
            try:
                return TrialResult.from_dict(self.job.results()[0])
            except Exception as exc:
                return TrialResult(status="failed", error=f"Slurm job {self.job.job_id}: {exc}"[:2000])
        if state in RETRYABLE and not self.cancelled and \
                self.requeues < self.backend.spec.max_requeues:
            self.requeues += 1
            self.job = self.backend.executor_for(self.request).submit(task_of(self.request),
                                                                      self.request)
            return None
        own = self.request.read_result(None)  # the trial may have reported oom or failed itself
        slurm_says = state in STATUS_OF or state in RETRYABLE  # not a rank's failure as it dies
        if own.status != "failed" or (self.request.folder.result_file.exists() and not slurm_says):
            return own
        status = STATUS_OF.get(state, "failed")
        if self.cancelled:
            detail = f"Slurm job {self.job.job_id} cancelled (ended {state})"
        else:
            detail = f"Slurm job {self.job.job_id} ended {state}"
            if state in RETRYABLE:
                detail += f" after {self.requeues} resubmissions"
        return TrialResult(status=status, error=detail, world_size=self.request.world_size)

    def cancel(self) -> None:
        self.cancelled = True
        self.job.cancel(check=False)

    def info(self) -> dict[str, Any]:
        return {"slurm_job": self.job.job_id, "slurm_folder": str(self.job.paths.folder.parent)}


class SlurmBackend(Backend):
    def __init__(self, spec, *, gpus_per_node: int = 1, use_gpus: bool = False):
        self.spec = spec
        self.gpus_per_node = gpus_per_node
        self.use_gpus = use_gpus

    @staticmethod
    def folder(request: TrialRequest) -> Path:
        return request.folder.slurm_dir

    def executor_for(self, request: TrialRequest, array: int = 1):
        s = self.spec
        nodes = max(1, math.ceil(request.world_size / self.gpus_per_node))
        params: dict[str, Any] = {
            "nodes": nodes, "ntasks_per_node": tasks_per_node(request, nodes),
            "time": max(s.time_limit_min, math.ceil(request.timeout_s / 60) + 1),
            "job_name": f"paratune-{request.trial_id}", "setup": list(s.setup),
            "additional_parameters": {"no_requeue": True, "signal": WARNING_SIGNAL,
                                      **s.sbatch_args},
        }
        for key in ("partition", "account", "qos", "constraint", "cpus_per_task"):
            if getattr(s, key) is not None:
                params[key] = getattr(s, key)
        if self.use_gpus:
            params["gpus_per_node"] = min(self.gpus_per_node, request.world_size)
        if array > 1:
            params["array_parallelism"] = s.array_parallelism
        executor = submitit.SlurmExecutor(folder=self.folder(request) / "%j", max_num_timeout=0)
        executor.update_parameters(**params)
        return executor

    def submit(self, request: TrialRequest) -> SlurmHandle:
        request.prepare()
        job = self.executor_for(request).submit(task_of(request), request)
        _keep_sbatch_script(self.folder(request), job.job_id, request)
        return SlurmHandle(self, request, job)

    def submit_many(self, requests: list[TrialRequest]) -> list[TrialHandle]:
        """Trials of one shape go out as one job array (its files in the first trial's folder);
        trials of several shapes are submitted one by one."""
        if len(requests) < 2 or len({r.world_size for r in requests}) > 1:
            return super().submit_many(requests)
        for request in requests:
            request.prepare()
        executor = self.executor_for(requests[0], array=len(requests))
        with executor.batch():
            jobs = [executor.submit(task_of(r), r) for r in requests]
        for request, job in zip(requests, jobs):
            _keep_sbatch_script(self.folder(requests[0]), job.job_id, request)
        return [SlurmHandle(self, r, j) for r, j in zip(requests, jobs)]

    def reattach(self, info: dict[str, Any], request: TrialRequest) -> SlurmHandle | None:
        """The trial's job, if it still lives after a controller crash, or ended on its own
        while no controller ran (its result is read, not run again)."""
        job_id = info.get("slurm_job")
        if not job_id:
            return None
        queued = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"],
                                capture_output=True, text=True)  # sacct lags new jobs
        if (queued.returncode != 0 or not queued.stdout.strip()) and not _ended_by_itself(job_id):
            return None
        job = submitit.SlurmJob(folder=Path(info["slurm_folder"]) / "%j", job_id=str(job_id),
                                tasks=tuple(range(max(1, request.world_size))))
        return SlurmHandle(self, request, job)

    def cleanup(self, info: dict[str, Any], folder: TrialFolder) -> None:
        """Cancel the job of a trial that is run again instead of re-attached."""
        if info.get("slurm_job"):
            subprocess.run(["scancel", str(info["slurm_job"])], capture_output=True)


# Job states of a job that ran to an end of its own (Slurm's `sacct` names): its result, or its
# failure, is the trial's. A cancelled job is not among them: the trial is run again.
ENDED_BY_ITSELF = ("COMPLETED", "FAILED", "OUT_OF_MEMORY", "TIMEOUT")


def _ended_by_itself(job_id: str) -> bool:
    """Whether Slurm's accounting has the job as ended by itself (a job that left the queue
    while no controller watched it)."""
    states = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", str(job_id)],
                            capture_output=True, text=True).stdout.split()
    return bool(states) and states[0] in ENDED_BY_ITSELF
