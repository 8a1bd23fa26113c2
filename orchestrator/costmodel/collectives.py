"""Times of NCCL/RCCL collectives on a two-level topology (devices in a node × nodes).

A group is `p0` ranks inside each of `p1` nodes. Bandwidth: a collective spanning nodes moves
data over both levels at once (the libraries pipeline rings and trees through NVLink and NIC
hops), so its bandwidth term is that of the slower level: the intra-node part at the device's
fabric bandwidth, the inter-node part at the network bandwidth of the group's p0 devices in a
node, each with its 1/gpus_per_node share of the node's NICs (every device of a node is busy
with a collective of its own replica group at the same time). Rings are flat, so a ring that
spans nodes carries (p-1)/p of the buffer through every node's NICs.

Latency grows with the ring: a ring pass has p-1 steps and each step waits for its slowest
hop, so a ring spanning nodes pays (p-1)·α_inter, inside a node (p-1)·α_intra (NCCL's tuning
model, src/graph/tuning.cc: `latencies += nsteps * lat`). All-gather, reduce-scatter and
broadcast are rings in NCCL and RCCL; all-reduce is a ring or a double binary tree, whichever
is faster (tree latency 2·((p0-1)·α_intra + log2(p1)·α_inter), the same tuning model).
Message size: each ring step moves a chunk of v/p bytes, and a chunk reaches half the link
bandwidth at `msg_half_bytes` (protocol and per-step setup costs: nccl-tests' bus bandwidth
curves reach half their plateau at tens to hundreds of KB per rank), i.e. step time
α + (chunk + msg_half)/bw. Each call also pays a fixed cost once (`call_alpha`: kernel launch
and protocol set-up, NCCL's baseLat).
Sources: Thakur et al., Optimization of Collective Communication in MPICH (2005); NCCL
src/graph/tuning.cc; nccl-tests PERFORMANCE.md (bus bandwidth).
All-to-all (the expert dispatch): every rank sends (p-1)/p of its buffer, the part for its
node's p0 - 1 peers over the node's fabric and the rest through its share of the NICs, both
at once; nothing is relayed, so unlike a ring it pays each level's latency once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.presets import Cluster


@dataclass(frozen=True)
class Fabric:
    """Achievable bandwidths (bytes/s), per-step latencies (s) and half-bandwidth chunk size."""

    intra_bw: float
    inter_bw_per_device: float
    intra_alpha: float
    inter_alpha: float
    msg_half_bytes: float = 0.0
    call_alpha: float = 0.0

    @classmethod
    def of(cls, cluster: Cluster, gpus_per_node: int, bandwidth_efficiency: float) -> "Fabric":
        return cls(
            intra_bw=cluster.intra_node_gbps * 1e9 * bandwidth_efficiency,
            inter_bw_per_device=cluster.inter_node_gbps * 1e9 * bandwidth_efficiency
            / gpus_per_node,
            intra_alpha=cluster.intra_node_latency_us * 1e-6,
            inter_alpha=cluster.inter_node_latency_us * 1e-6,
            msg_half_bytes=cluster.msg_half_bytes,
            call_alpha=cluster.collective_base_latency_us * 1e-6,
        )

    def bandwidth_only(self) -> "Fabric":
        """The same links with no per-step latency or chunk cost: the β part of α-β."""
        return Fabric(self.intra_bw, self.inter_bw_per_device, 0.0, 0.0, 0.0, 0.0)

    # -- building blocks ---------------------------------------------------------------

    def _bandwidth(self, nbytes_total: float, p0: int, p1: int) -> float:
        """Seconds one ring pass of a buffer of `nbytes_total` takes on bandwidth alone:
        the slower of the intra-node pass and the flat ring through the NICs."""
        p = p0 * p1
        intra = (p0 - 1) / p0 * nbytes_total / self.intra_bw if p0 > 1 else 0.0
        inter = 0.0
        if p1 > 1:
            inter = (p - 1) / p * nbytes_total / (p0 * self.inter_bw_per_device)
        return max(intra, inter)

    def _steps(self, nbytes_total: float, p0: int, p1: int) -> float:
        """Latency of one ring pass: p-1 steps, each α plus its chunk's message-size cost."""
        p = p0 * p1
        if p1 > 1:
            return (p - 1) * (self.inter_alpha + self.msg_half_bytes / self.inter_bw_per_device)
        return (p0 - 1) * (self.intra_alpha + self.msg_half_bytes / self.intra_bw)

    def _ring(self, nbytes_total: float, p0: int, p1: int) -> float:
        if p0 * p1 <= 1 or nbytes_total <= 0:
            return 0.0
        return (self.call_alpha + self._bandwidth(nbytes_total, p0, p1)
                + self._steps(nbytes_total, p0, p1))

    # -- collectives -----------------------------------------------------------------

    def all_gather(self, nbytes_total: float, p0: int, p1: int = 1) -> float:
        return self._ring(nbytes_total, p0, p1)

    def reduce_scatter(self, nbytes_total: float, p0: int, p1: int = 1) -> float:
        return self._ring(nbytes_total, p0, p1)

    def all_reduce(self, nbytes: float, p0: int, p1: int = 1) -> float:
        """Ring (reduce-scatter + all-gather) or double binary tree, whichever is faster."""
        if p0 * p1 <= 1 or nbytes <= 0:
            return 0.0
        bandwidth = 2 * self._bandwidth(nbytes, p0, p1)
        ring = 2 * self._steps(nbytes, p0, p1)
        half_intra = self.msg_half_bytes / self.intra_bw
        tree = 2 * (p0 - 1) * (self.intra_alpha + half_intra)
        if p1 > 1:
            half_inter = self.msg_half_bytes / self.inter_bw_per_device
            tree += 2 * math.log2(p1) * (self.inter_alpha + half_inter)
        return self.call_alpha + bandwidth + min(ring, tree)

    def broadcast(self, nbytes: float, p0: int, p1: int = 1) -> float:
        """A pipelined ring (chain): the buffer crosses the slowest link once; p-1 hops."""
        if p0 * p1 <= 1 or nbytes <= 0:
            return 0.0
        bw = self.inter_bw_per_device if p1 > 1 else self.intra_bw
        return self.call_alpha + nbytes / bw + self._steps(nbytes, p0, p1)

    def all_to_all(self, nbytes: float, p0: int, p1: int = 1) -> float:
        """Each rank sends 1/p of its `nbytes` buffer to every other rank (p0 in its node,
        the rest in p1 - 1 other nodes) at once: NCCL posts the p - 1 sends together, so
        the two levels run in parallel and the slower one sets the time; each peer's
        message pays the chunk cost, and each level its step latency once."""
        p = p0 * p1
        if p <= 1 or nbytes <= 0:
            return 0.0
        chunk = nbytes / p
        intra = 0.0
        if p0 > 1:
            intra = self.intra_alpha + (p0 - 1) * (chunk + self.msg_half_bytes) / self.intra_bw
        inter = 0.0
        if p1 > 1:
            inter = self.inter_alpha + (p - p0) * (chunk + self.msg_half_bytes) \
                / self.inter_bw_per_device
        return self.call_alpha + max(intra, inter)

    def send(self, nbytes: float, crosses_nodes: bool) -> float:
        if nbytes <= 0:
            return 0.0
        if crosses_nodes:
            return self.inter_alpha + (nbytes + self.msg_half_bytes) / self.inter_bw_per_device
        return self.intra_alpha + (nbytes + self.msg_half_bytes) / self.intra_bw

    def bucketed_reduce_scatter(self, nbytes: float, bucket: float, p0: int,
                                p1: int = 1) -> float:
        """Gradients reduce-scattered in buckets of U bytes (Megatron-Core's distributed
        optimizer), as `bucketed_all_reduce` all-reduces them."""
        if nbytes <= 0:
            return 0.0
        buckets = max(1.0, nbytes / bucket)
        return buckets * self.reduce_scatter(nbytes / buckets, p0, p1)

    def bucketed_all_reduce(self, nbytes: float, bucket: float, p0: int, p1: int = 1) -> float:
        """AMSP's (v / U) · t(AR, U, p0×p1): gradients reduced in buckets of U bytes."""
        if nbytes <= 0:
            return 0.0
        buckets = max(1.0, nbytes / bucket)
        return buckets * self.all_reduce(nbytes / buckets, p0, p1)
