"""Fit a cluster preset to what `paratune profile` measured (jobs/profile.py): pure arithmetic.

- Compute: the measured fraction of peak of a model's training step (jobs/profile.py: the
  built-in trainer's LLaMA, so attention, norms, loss and per-op costs count as in a trial),
  at each (m tokens, width n), against compute.py's shape model
  `E · m/(m + half_m) · n/(n + half_n)`: a grid over the two halves, E in closed form by
  relative least squares. E is relative to the preset's nominal peak; where the device beats
  it (a CPU's nominal peak assumes a base clock and one FMA width), the profiled preset's
  peak is raised to the measured one and E set to 1, so the fitted shape is kept whole
  (capping E at 1 instead left every prediction slow by the factor cut off).
- Optimizer: the measured seconds of an AdamW step over the parameters it updated.
- Collectives: collectives.py's ring model, all-reduce `2(p-1)/p · v/bw + 2(p-1)·α` and
  all-gather `(p-1)/p · v/bw + (p-1)·α`, fitted by non-negative least squares on relative
  errors: inside a node (bw the device's link), and apart for groups that span nodes (bw the
  p0 group members' share of their node's NICs, p0·bw_device: the ring's inter-node term).
  α then holds the per-step chunk cost too (`msg_half_bytes` = 0), and a link rate is the
  fitted bandwidth over the model's `bandwidth_efficiency` (the node's NICs: the per-device
  share times the ranks per node, all of which ran a group at once).
- The trainer's own steps (costmodel/trainer_overhead_fit.py): its DDP step rescales the compute
  efficiency to what a trial's loop reaches; its ZeRO-3 and TP steps give PyTorch's
  software cost per FSDP2 and per DTensor collective.
Only what the profile measured changes; the rest of the preset (peak, memory, the network
between nodes when the profile ran on one) is kept, and the preset says where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.trainer_overhead_fit import HALVES, fit_trainer_overhead, scaled_compute
from orchestrator.presets import Cluster


@dataclass(frozen=True)
class GemmFit:
    efficiency: float
    half_m: float
    half_n: float
    median_error: float


@dataclass(frozen=True)
class LinkFit:
    bandwidth: float  # bytes/s achieved
    latency_s: float  # per ring step
    median_error: float


def _shape(m: float, n: float, hm: float, hn: float) -> float:
    return m / (m + hm) * n / (n + hn)


def fit_gemm(rows: list[dict], peak_tflops: float) -> GemmFit:
    """rows: {"m", "n", "tflops"} per measured shape (m tokens per rank, width n)."""
    effs = [r["tflops"] / peak_tflops for r in rows]
    best = None
    for hm in HALVES:
        for hn in HALVES:
            g = [_shape(r["m"], r["n"], hm, hn) for r in rows]
            # minimise Σ ((E·g - e)/e)²  →  E = Σ g/e / Σ (g/e)²
            e_hat = sum(gi / ei for gi, ei in zip(g, effs)) / sum((gi / ei) ** 2
                                                                  for gi, ei in zip(g, effs))
            errors = sorted(abs(e_hat * gi / ei - 1) for gi, ei in zip(g, effs))
            loss = sum(x * x for x in errors)
            if best is None or loss < best[0]:
                best = (loss, e_hat, hm, hn, errors[len(errors) // 2])
    _, eff, hm, hn, median = best
    return GemmFit(eff, hm, hn, median)


def fit_link(rows: list[dict]) -> LinkFit:
    """rows: {"op": all_reduce | all_gather, "group", "bytes", "seconds"[, "nodes"]}, all inside
    one node or all spanning nodes (then the bandwidth is per device of a group's node)."""
    import numpy as np
    from scipy.optimize import nnls

    x, y = [], []
    for r in rows:
        p, v, t, nodes = r["group"], r["bytes"], r["seconds"], r.get("nodes", 1)
        per_node = p // nodes if nodes > 1 else 1
        rounds = 2 if r["op"] == "all_reduce" else 1
        x.append([rounds * (p - 1) / p * v / (per_node * t), rounds * (p - 1) / t])
        y.append(1.0)
    (inv_bw, alpha), _ = nnls(np.array(x), np.array(y))
    bw = 1 / inv_bw if inv_bw > 0 else float("inf")
    errors = sorted(abs(float(np.dot(row, [inv_bw, alpha])) - 1) for row in x)
    return LinkFit(bw, float(alpha), errors[len(errors) // 2])


def profiled_cluster(base: Cluster, profile: dict, name: str | None = None) -> Cluster:
    """`base` with the compute and intra-node link constants the profile measured."""
    gemm = fit_gemm(profile["layers"], base.peak_tflops)
    changes: dict = {"name": name or f"{base.name}-profiled",
                     "compute_efficiency": float(min(gemm.efficiency, 1.0)),
                     "gemm_half_m": float(gemm.half_m), "gemm_half_n": float(gemm.half_n)}
    if gemm.efficiency > 1.0:  # faster than the nominal peak: the peak was wrong, not E
        changes["peak_tflops"] = float(base.peak_tflops * gemm.efficiency)
    optimizer = profile.get("optimizer")
    if optimizer and optimizer["params"] > 0:
        changes["optimizer_ns_per_param"] = float(optimizer["seconds"] / optimizer["params"]
                                                  * 1e9)
    rows = profile.get("collectives", [])
    inside = [r for r in rows if r.get("nodes", 1) == 1 and r["group"] <= base.gpus_per_node]
    between = [r for r in rows if r.get("nodes", 1) > 1]
    efficiency = Coefficients().bandwidth_efficiency
    if inside:
        link = fit_link(inside)
        gbps = float(min(link.bandwidth / efficiency / 1e9, 1e6))
        latency_us = float(link.latency_s * 1e6)
        # Unmeasured, the network between nodes is never faster than the links inside one.
        changes.update(intra_node_gbps=gbps, intra_node_latency_us=latency_us,
                       inter_node_gbps=min(base.inter_node_gbps, gbps),
                       inter_node_latency_us=max(base.inter_node_latency_us, latency_us))
    if between:
        net = fit_link(between)
        per_node = profile.get("ranks_per_node", base.gpus_per_node)
        changes.update(inter_node_latency_us=float(net.latency_s * 1e6),
                       inter_node_gbps=float(min(net.bandwidth * per_node / efficiency / 1e9,
                                                 1e6)))
    if inside or between:  # a fitted per-step latency holds the stock chunk and per-call costs
        changes.update(msg_half_bytes=0.0, collective_base_latency_us=0.0)
    changes.update(fsdp_call_overhead_us=0.0, tp_call_overhead_us=0.0)
    cluster = base.model_copy(update=changes)
    if profile.get("runtime"):
        software = fit_trainer_overhead(cluster, profile["runtime"],
                               profile.get("ranks_per_node", base.gpus_per_node))
        if software is not None:
            if software.gemm_half_m is not None:
                cluster = cluster.model_copy(update={"gemm_half_m": software.gemm_half_m})
            cluster = scaled_compute(cluster, software.compute_scale).model_copy(update={
                "fsdp_call_overhead_us": software.fsdp_call_overhead_us,
                "tp_call_overhead_us": software.tp_call_overhead_us})
    return cluster
