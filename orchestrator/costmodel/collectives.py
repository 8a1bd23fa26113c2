"""α–β times of NCCL-style collectives on a two-level topology (GPUs in a node × nodes).

A group is `p0` ranks inside each of `p1` nodes. A collective spanning nodes moves data over
both levels at once (NCCL pipelines its rings and trees through NVLink and NIC hops), so its
bandwidth term is that of the slower level: the intra-node part at the device's fabric
bandwidth, the inter-node part at the network bandwidth of the group's p0 devices in a node,
each with its 1/gpus_per_node share of the node's NICs (every device of a node is busy with a
collective of its own replica group at the same time). NCCL's rings are flat, so a ring that
spans nodes carries (p-1)/p of the buffer through every node's NICs, not (p1-1)/p1 as an ideal
hierarchical algorithm would. Latencies of both levels add. Latency: ring algorithms pay
α per step ((p-1)·α: all-gather, reduce-scatter); all-reduce uses trees across nodes
(2·log2(p)·α, NCCL's double binary tree); broadcast is pipelined (log2(p)·α).
Sources: Thakur et al., Optimization of Collective Communication in MPICH (2005); NCCL docs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.presets import Cluster


@dataclass(frozen=True)
class Fabric:
    """Achievable bandwidths (bytes/s) and latencies (s) of one cluster."""

    intra_bw: float
    inter_bw_per_device: float
    intra_alpha: float
    inter_alpha: float

    @classmethod
    def of(cls, cluster: Cluster, gpus_per_node: int, bandwidth_efficiency: float) -> "Fabric":
        return cls(
            intra_bw=cluster.intra_node_gbps * 1e9 * bandwidth_efficiency,
            inter_bw_per_device=cluster.inter_node_gbps * 1e9 * bandwidth_efficiency
            / gpus_per_node,
            intra_alpha=cluster.intra_node_latency_us * 1e-6,
            inter_alpha=cluster.inter_node_latency_us * 1e-6,
        )

    # -- building blocks ---------------------------------------------------------------

    def _ring(self, nbytes_total: float, p0: int, p1: int) -> float:
        """One ring pass (all-gather or reduce-scatter) of a buffer whose full size is
        `nbytes_total`: intra-node over p0, then inter-node over p1 on 1/p0 of it."""
        intra = (p0 - 1) / p0 * nbytes_total / self.intra_bw
        inter = self._inter(nbytes_total, p0, p1)
        return max(intra, inter) + (p0 - 1) * self.intra_alpha + (p1 - 1) * self.inter_alpha

    def _inter(self, nbytes: float, p0: int, p1: int) -> float:
        """One flat-ring pass of `nbytes` through the NICs of a group spanning p1 nodes."""
        if p1 <= 1:
            return 0.0
        p = p0 * p1
        return (p - 1) / p * nbytes / (p0 * self.inter_bw_per_device)

    # -- collectives -----------------------------------------------------------------

    def all_gather(self, nbytes_total: float, p0: int, p1: int = 1) -> float:
        return self._ring(nbytes_total, p0, p1)

    def reduce_scatter(self, nbytes_total: float, p0: int, p1: int = 1) -> float:
        return self._ring(nbytes_total, p0, p1)

    def all_reduce(self, nbytes: float, p0: int, p1: int = 1) -> float:
        """Reduce-scatter + all-gather bandwidth; tree latency across nodes."""
        if p0 * p1 <= 1 or nbytes <= 0:
            return 0.0
        intra = 2 * (p0 - 1) / p0 * nbytes / self.intra_bw
        inter = 2 * self._inter(nbytes, p0, p1)
        latency = 2 * (p0 - 1) * self.intra_alpha + 2 * math.log2(p1) * self.inter_alpha
        return max(intra, inter) + latency

    def broadcast(self, nbytes: float, p0: int, p1: int = 1) -> float:
        """Pipelined broadcast: bounded by the slowest link it crosses."""
        if p0 * p1 <= 1 or nbytes <= 0:
            return 0.0
        if p1 > 1:
            return nbytes / self.inter_bw_per_device + math.log2(p0 * p1) * self.inter_alpha
        return nbytes / self.intra_bw + math.log2(p0) * self.intra_alpha

    def send(self, nbytes: float, crosses_nodes: bool) -> float:
        if nbytes <= 0:
            return 0.0
        if crosses_nodes:
            return self.inter_alpha + nbytes / self.inter_bw_per_device
        return self.intra_alpha + nbytes / self.intra_bw

    def bucketed_all_reduce(self, nbytes: float, bucket: float, p0: int, p1: int = 1) -> float:
        """AMSP's (v / U) · t(AR, U, p0×p1): gradients reduced in buckets of U bytes."""
        if nbytes <= 0:
            return 0.0
        buckets = max(1.0, nbytes / bucket)
        return buckets * self.all_reduce(nbytes / buckets, p0, p1)
