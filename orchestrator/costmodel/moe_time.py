"""Step time of a mixture-of-experts layout: expert compute, token dispatch, overlap.

Pure arithmetic, in seconds; a dense model gets nothing from here. Per MoE layer and
micro-batch on a rank (layout in experts.py, T tokens a rank routes, k experts per token):
- compute: the routed experts' FLOPs run as grouped GEMMs whose shape is the expert's, not
  the layer's: m = tokens per local expert = T x k x ep / num_experts (x etp gathered with
  sequence parallelism), n = the expert's hidden size / etp, through compute.py's shape rule;
  the rest of the layer at the dense shape. The busiest expert rank sets the pace, so the
  expert part takes `imbalance` (max/mean expert load, coefficients.py) times the mean.
- dispatch and combine: an all-to-all each way forward and backward (4 x T x k x h bytes x
  (ep-1)/ep per rank, times the imbalance: the busiest rank receives the most), 2 more when
  full recompute replays the forward; priced by collectives.py where the EP group lands: ep
  ranks etp apart inside ep x etp consecutive ranks, so a node holds gpus_per_node / etp of
  them and the rest are across nodes. With ETP > 1 and sequence parallelism the dispatched
  tokens are all-gathered over the ETP group and the outputs reduce-scattered back.
- tensor parallelism: an MoE layer's routed experts run over the EP and ETP groups, so only
  its attention (and shared experts) keep the TP collectives (`moe_tp_layers`).
- per-node dispatch (DeepEP, Megatron-LM's flex dispatcher): a token crosses the network once
  per node it reaches (with DeepSeek-V3's node-limited routing, at most its group-limited
  routing's groups when they are the EP group's nodes) and is forwarded over NVLink to its
  experts there; the all-to-all above sends every (token, expert) copy.
- overlap: none by default: Megatron-LM's alltoall dispatcher waits for each all-to-all
  (its MoE guide: unoptimised all-to-all takes 30-40% of a step). A trainer that overlaps it
  (`--overlap-moe-expert-parallel-comm`, zero_engine.py) hides it behind up to
  `overlap_expert_comm` of the step's compute (coefficients.py).
- expert gradients reduce over expert-DP (data_parallel.py, with experts.expert_layout).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.compute import shape_efficiency
from orchestrator.costmodel.experts import (
    expert_tp,
    gathered,
    moe_layers_per_rank,
    tokens_per_rank,
)
from orchestrator.presets import Cluster, ModelShape
from orchestrator.space import Layout


def routed_expert_flops(model: ModelShape, tokens: int, layout: Layout) -> float:
    """FLOPs of the routed experts' matrices in one step (forward, backward, and the forward
    full recompute replays), as `model_flops_per_iteration` counts them."""
    if not model.is_moe:
        return 0.0
    matrices = 3 if model.gated_mlp else 2
    forward = 2 * matrices * model.hidden * model.experts_per_token * model.expert_ffn_hidden
    passes = 3 + layout.recompute_fraction(model.num_layers)
    return forward * model.moe_layers * tokens * passes


def expert_gemm_efficiency(cluster: Cluster, model: ModelShape, layout: Layout) -> float:
    """The shape rule at a local expert's grouped GEMM: m its tokens, n its hidden / etp."""
    routed = tokens_per_rank(model, layout) * model.experts_per_token * gathered(layout)
    per_expert = routed * layout.ep / model.num_experts
    return shape_efficiency(cluster, per_expert, model.expert_ffn_hidden / expert_tp(layout))


def compute_seconds(cluster: Cluster, model: ModelShape, layout: Layout, flops: float,
                    dense_efficiency: float, imbalance: float) -> float:
    """Seconds of a step's `flops` on a rank: the routed experts at their own shape and the
    busiest rank's load, the rest at the dense shape."""
    peak = cluster.peak_tflops * 1e12 * layout.world_size
    if not model.is_moe:
        return flops / layout.world_size / (cluster.peak_tflops * 1e12 * dense_efficiency)
    experts = routed_expert_flops(model, layout.global_batch_size() * model.seq_len, layout)
    expert_eff = expert_gemm_efficiency(cluster, model, layout)
    return (flops - experts) / (peak * dense_efficiency) + experts * imbalance / (peak * expert_eff)


def ep_mesh(layout: Layout, gpus_per_node: int) -> tuple[int, int]:
    """(EP ranks in a node, nodes) of an EP group: ep ranks etp apart, consecutive blocks."""
    return layout.dims.even_node_split("ep", gpus_per_node)


def off_node_copies(model: ModelShape, nodes: int) -> float:
    """Nodes other than its own that a token is sent to, once each, by a per-node dispatch:
    its group-limited routing's groups when they are the EP group's nodes (DeepSeek-V3's
    node-limited routing), else the distinct nodes of k experts spread evenly."""
    if model.moe_router_num_groups == nodes:
        return model.moe_router_group_topk * (1 - 1 / nodes)
    return (nodes - 1) * (1 - (1 - 1 / nodes) ** model.experts_per_token)


def dispatch_call(model: ModelShape, layout: Layout, fabric: Fabric,
                  gpus_per_node: int, buffer: float, per_node: bool) -> float:
    """One dispatch (or combine) all-to-all of a rank's `buffer` of (token, expert) copies.
    Per node (DeepEP), a token crosses the network once per node it reaches and its copies
    are forwarded over NVLink: the two levels overlap, the slower one sets the time."""
    p0, p1 = ep_mesh(layout, gpus_per_node)
    if not per_node or p1 == 1:
        return fabric.all_to_all(buffer, p0, p1)
    crossing = buffer / model.experts_per_token * off_node_copies(model, p1)
    return max(fabric.all_to_all(buffer, p0, 1),
               fabric.all_to_all(crossing * p1 / (p1 - 1), 1, p1))


def dispatch_comm(model: ModelShape, layout: Layout, fabric: Fabric,
                  gpus_per_node: int, act_bytes: int, imbalance: float,
                  per_node: bool = False) -> float:
    """Seconds per step of the dispatch and combine collectives (raw, before overlap)."""
    etp = expert_tp(layout)
    if not model.is_moe or (layout.ep == 1 and etp == 1):
        return 0.0
    routed = tokens_per_rank(model, layout) * model.experts_per_token * imbalance
    buffer = routed * model.hidden * act_bytes
    per_call = dispatch_call(model, layout, fabric, gpus_per_node, buffer, per_node)
    if etp > 1 and layout.sequence_parallel:  # all-gather in, reduce-scatter out
        per_call += fabric.all_gather(buffer * etp, *layout.dims.node_split("etp", gpus_per_node))
    calls = 4 + 2 * layout.recompute_fraction(model.num_layers)
    return moe_layers_per_rank(model, layout) * layout.grad_accum_steps * calls * per_call


@dataclass(frozen=True)
class ExpertComm:
    """The dispatch time the step waits for, its bandwidth part and its latency part."""

    bandwidth_s: float
    latency_s: float

    @property
    def total_s(self) -> float:
        return self.bandwidth_s + self.latency_s


def exposed_dispatch(model: ModelShape, layout: Layout, fabric: Fabric,
                     gpus_per_node: int, act_bytes: int, imbalance: float, hidden_by: float,
                     per_node: bool = False) -> ExpertComm:
    """The dispatch left on the critical path after `hidden_by` seconds of compute cover it,
    split as calibration scales it (bandwidth apart from per-call latency, as TP's)."""
    raw = dispatch_comm(model, layout, fabric, gpus_per_node, act_bytes, imbalance, per_node)
    if raw <= 0:
        return ExpertComm(0.0, 0.0)
    bandwidth = dispatch_comm(model, layout, fabric.bandwidth_only(), gpus_per_node,
                              act_bytes, imbalance, per_node)
    left = max(0.0, raw - hidden_by) / raw
    return ExpertComm(bandwidth * left, (raw - bandwidth) * left)


def moe_tp_layers(model: ModelShape, layout: Layout) -> float:
    """Layers' worth of TP collectives per rank: an MoE layer's routed experts leave the TP
    group (for the EP and ETP groups' collectives, priced above), so it keeps half a dense
    layer's, its attention's; shared experts are split over TP like a dense MLP and keep
    theirs. Without sequence parallelism ETP > 1 reduces over TP as a dense MLP does."""
    layers = layout.busiest_stage_layers(model.num_layers)
    moe = moe_layers_per_rank(model, layout)
    leaves = layout.sequence_parallel or expert_tp(layout) == 1
    if not moe or model.shared_expert_ffn_hidden or not leaves:
        return layers
    return layers - moe / 2


def step_efficiency(cluster: Cluster, model: ModelShape, layout: Layout, flops: float,
                    dense_efficiency: float, imbalance: float) -> float:
    """The fraction of peak a step's compute reaches: the dense shape's, or for MoE the
    blend of the dense and the expert shapes with the busiest rank's load."""
    if not model.is_moe:
        return dense_efficiency
    seconds = compute_seconds(cluster, model, layout, flops, dense_efficiency, imbalance)
    return flops / (layout.world_size * cluster.peak_tflops * 1e12 * seconds)
