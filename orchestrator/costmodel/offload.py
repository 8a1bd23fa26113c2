"""Offload: model states kept in host memory, and the transfers and host work that costs.

Pure arithmetic, after ZeRO-Offload (Ren et al., arXiv 2101.06840, §4) and ZeRO-Infinity:
- `offload: optimizer`: the rank's optimizer shard (fp32 master weights and both Adam moments,
  and the fp32 gradient the step reads) lives in host memory. Each step moves the shard's bf16
  gradients to the host, runs AdamW there on the node's CPU cores (shared by the node's ranks,
  `host_adam_ns_per_param` per parameter for the node), and moves the updated bf16 weights back.
  The gradient copies overlap the backward as gradient reduction does (`overlap_grad` of the
  last micro-batch's backward); the host step and the copy back are exposed (ZeRO-Offload's
  one-step delayed update, which would hide them, is off by default).
- `offload: optimizer+params` (ZeRO-3): the weight shard lives on the host too; every
  micro-batch fetches it for the forward and again for the backward, hidden behind up to
  `overlap_grad` of that micro-batch's compute (prefetching contends for the same links).
Transfers run at `host_link_gbps` per device times the collectives' bandwidth efficiency.
Host memory is bounded per node: a layout whose ranks together hold more than the node's
`host_memory_gb` (less HOST_RESERVE for the system) does not fit. On a CPU cluster the host is
the device: offloading moves nothing out of its memory, and costs its copies all the same.
"""

from __future__ import annotations

from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.presets import Cluster
from orchestrator.space import Layout

# Host memory a node keeps for its system, the data loader and pinned staging buffers.
HOST_RESERVE = 0.2
GRAD_BYTES = 2  # bf16 gradients and weights cross the link


def offloads_optimizer(layout: Layout) -> bool:
    return layout.offload != "none"


def offloads_params(layout: Layout) -> bool:
    return layout.offload == "optimizer+params"


def offload_unsupported(cluster: Cluster, layout: Layout) -> str | None:
    """Why this cluster cannot price the layout's offload, or None."""
    if not offloads_optimizer(layout) or cluster.host_link_gbps > 0:
        return None
    return (f"offload {layout.offload}: cluster {cluster.name} gives no host_link_gbps (the "
            "host-device bandwidth per device); set it in the cluster")


def host_capacity_bytes(cluster: Cluster, gpus_per_node: int) -> float:
    """Host memory one rank may fill (0: unbounded, the cluster does not say)."""
    return cluster.host_memory_gb * 1e9 * (1 - HOST_RESERVE) / gpus_per_node


def offload_seconds(layout: Layout, cluster: Cluster, c: Coefficients, gpus_per_node: int,
                    shard_params: float, fetched_params: float, compute_s: float) -> float:
    """Exposed seconds of a step's host traffic and host optimizer step. `shard_params`: the
    parameters of the rank's optimizer shard; `fetched_params`: those of its weight shard,
    fetched per micro-batch when the weights live on the host."""
    if not offloads_optimizer(layout):
        return 0.0
    link = cluster.host_link_gbps * 1e9 * c.bandwidth_efficiency
    if link <= 0:  # offload_unsupported says why
        return 0.0
    m = layout.grad_accum_steps
    backward_per_micro = compute_s / m * 2 / 3
    to_host = GRAD_BYTES * shard_params / link
    exposed = max(0.0, to_host - c.overlap_grad * backward_per_micro)
    ranks = min(gpus_per_node, layout.world_size)
    exposed += cluster.host_adam_ns_per_param * 1e-9 * shard_params * ranks
    exposed += GRAD_BYTES * shard_params / link
    if offloads_params(layout):
        fetch = 2 * GRAD_BYTES * fetched_params / link
        exposed += m * max(0.0, fetch - c.overlap_grad * compute_s / m)
    return exposed
