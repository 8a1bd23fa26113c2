"""What a Slurm job runs on its nodes (submitit pickles these with the trial request): one
rank, one node or the whole trial from the job's first task, placed by Slurm's own variables
as submitit reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from submitit import JobEnvironment
from submitit.helpers import TorchDistributedEnvironment

from orchestrator.backends.base import TrialRequest
from orchestrator.backends.on_node import run_on_node
from orchestrator.trial.process import node_argv, rank_argv


def run_rank(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any] | None:
    """One rank of a `rank-env` trial launched as one task per rank (srun): rank, world and
    rendezvous come from the scheduler (submitit's TorchDistributedEnvironment); the result
    comes back from rank 0 (None from the others)."""
    os.environ["MASTER_PORT"] = str(rendezvous_port(JobEnvironment().job_id))
    rank = TorchDistributedEnvironment().export(set_cuda_visible_devices=False,
                                                overwrite=True).rank
    result = run_on_node(request, rank_argv(request.run), rank, poll_s, attempt=attempt_of_job())
    return result.to_dict() if rank == 0 else None


def run_node(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any] | None:
    """One node of a `torchrun` trial launched as one task per node: torchrun starts this
    node's ranks and meets the other nodes' at the allocation's first host. The result comes
    back from the first node (None from the others)."""
    job = JobEnvironment()
    per_node = -(-request.world_size // job.num_nodes)
    argv = node_argv(request.run, nodes=job.num_nodes, node_rank=job.node, per_node=per_node,
                     master=job.hostnames[0], port=rendezvous_port(job.job_id),
                     rendezvous_id=str(job.job_id))
    result = run_on_node(request, argv, job.node, poll_s, attempt=attempt_of_job())
    return result.to_dict() if job.node == 0 else None


def run_once(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any] | None:
    """A `self` trial (it starts its own ranks over the allocation) from the job's first task."""
    if JobEnvironment().global_rank != 0:
        return None
    return run_on_node(request, list(request.run.program), 0, poll_s).to_dict()


def attempt_of_job() -> str:
    """This run of the job: its id, and how often Slurm has requeued it under that id."""
    return f"{JobEnvironment().job_id}-{os.environ.get('SLURM_RESTART_COUNT', '0')}"


def rendezvous_port(job_id: str) -> int:
    """rank 0's port for the trial's rendezvous, the same on every task of the job and spread
    by job so trials sharing a node differ. It lies below the kernel's ephemeral range, which
    any process's outgoing connection may take at random: submitit's own choice (a port in
    20000-60000 seeded by the job id) was once found held by another process, and the trial
    never met."""
    digits = "".join(ch for ch in str(job_id) if ch.isdigit()) or "0"
    span = max(ephemeral_ports()[0] - LOWEST_RENDEZVOUS_PORT, 1000)
    return LOWEST_RENDEZVOUS_PORT + int(digits) % span


LOWEST_RENDEZVOUS_PORT = 20000


def ephemeral_ports(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's range for ports it hands out to outgoing connections (Linux's default where
    the file cannot be read)."""
    try:
        low, high = (int(v) for v in Path(path).read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high
