"""Where a mixture-of-experts layout puts its experts, and the memory they take on a rank.

Megatron-Core folds expert parallelism into the tp x cp x dp ranks of a pipeline stage (MoE
Parallel Folding, arXiv 2504.14960; parallel_state.py): within a stage the expert ranks are
ordered etp fastest, then ep, then the experts' data-parallel group, so an EP group holds
ep ranks `etp` apart inside ep x etp consecutive ranks, and the expert-DP group the ranks
ep x etp apart. Per rank:
- weights, gradients, optimizer states: the stage's routed-expert parameters over ep x etp,
  sharded by ZeRO/FSDP over expert-DP = tp x cp x dp / (ep x etp), not dp; the rest of the model
  (attention, router, shared experts, dense layers, embeddings) over tp, sharded over dp.
- activations of an MoE layer for one micro-batch, in place of the dense MLP's: the router's
  fp32 logits and probabilities, the permuted tokens entering the experts (T x k x h, gathered
  over etp with sequence parallelism), the experts' hidden activations (gate and up outputs,
  the activation's output: 3 tensors of ffn/etp per token for a gated MLP, 2 otherwise, as
  Korthikanti et al. count the dense MLP) and the expert outputs kept for the weighted
  combine; T = micro-batch x sequence / cp, over tp with sequence parallelism. The busiest rank
  receives `imbalance` times the mean load (moe_time.py).
- transients: the dispatch's send and receive buffers of one layer, and under ZeRO-3 the
  gathered weights of one layer's local experts (current and prefetched), not all experts.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from orchestrator.presets import ModelShape
from orchestrator.space import Layout, ShardingFactors
from orchestrator.pipeline_split import layer_chunks

# Bytes per routed token per expert the router keeps: fp32 logits and probabilities.
ROUTER_BYTES = 8


def expert_tp(layout: Layout) -> int:
    """ETP: etp, or tp when unset (Megatron-Core's default)."""
    return layout.dims.expert_tp


def expert_dp(layout: Layout) -> int:
    """The experts' data-parallel degree within a stage: tp x cp x dp / (ep x etp)."""
    return layout.dims.expert_dp


def is_moe_layer(model: ModelShape, i: int) -> bool:
    """Megatron's --moe-layer-freq after DeepSeek's first dense layers (result.py counts alike)."""
    return model.is_moe and i >= model.first_dense_layers and i % model.moe_layer_freq == 0


def moe_layers_per_rank(model: ModelShape, layout: Layout) -> int:
    """MoE layers on the rank holding the most: all of them without a pipeline, else the
    largest count over pipeline ranks (each holds every p-th of the p x v model chunks)."""
    if not model.is_moe:
        return 0
    if layout.pp == 1:
        return model.moe_layers
    return _busiest_moe_layers(model.num_layers, model.first_dense_layers, model.moe_layer_freq,
                               layout.pp, layout.virtual_stages, layout.pipeline_split)


@lru_cache(maxsize=4096)  # the cost model asks for every estimate
def _busiest_moe_layers(num_layers: int, first_dense_layers: int, moe_layer_freq: int, p: int,
                        virtual_stages: int, split: str) -> int:
    """The most MoE layers (is_moe_layer's rule) any of the p pipeline ranks holds."""
    counts = [0] * p
    for i, chunk in enumerate(layer_chunks(num_layers, p, virtual_stages, split)):
        if i >= first_dense_layers and i % moe_layer_freq == 0:
            counts[chunk % p] += 1
    return max(counts)


def expert_params_per_rank(model: ModelShape, layout: Layout) -> float:
    """Routed-expert parameters a rank holds: its stage's experts over ep x etp."""
    layers = moe_layers_per_rank(model, layout)
    return layers * model.num_experts * model.expert_params / (layout.ep * expert_tp(layout))


def expert_layout(layout: Layout) -> Layout:
    """The layout the expert weights' data parallelism sees: expert-DP replicas ep x etp
    ranks apart, so `dp_mesh` and the ZeRO factors of this config are the experts'. An AMSP
    factor set on the dense mesh becomes the ZeRO stage it amounts to (what it shards)."""
    stage = layout.zero_stage
    if layout.sharding is not None:
        f = layout.sharding
        stage = 3 if f.sp > 1 else 2 if f.sg > 1 else 1 if f.sos > 1 else 0
    return dataclasses.replace(
        layout, tp=layout.ep * expert_tp(layout), cp=1, dp=expert_dp(layout), ep=1, etp=None,
        sequence_parallel=False, sharding=None, zero_stage=stage)


def expert_factors(layout: Layout, gpus_per_node: int, engine_of) -> ShardingFactors:
    """The ZeRO/FSDP factors of the expert weights, over expert-DP."""
    over_expert_dp = expert_layout(layout)
    return over_expert_dp.factors(gpus_per_node, engine_of(over_expert_dp.zero_stage))


def tokens_per_rank(model: ModelShape, layout: Layout) -> float:
    """T: tokens a rank routes per micro-batch (its 1/cp of each sequence, split over tp
    with sequence parallelism)."""
    tokens = layout.micro_batch_size * model.seq_len / layout.cp
    return tokens / layout.tp if layout.sequence_parallel else tokens


def gathered(layout: Layout) -> int:
    """How many ranks' tokens an expert rank processes: its ETP group's with sequence
    parallelism (all-gathered after the dispatch), else its own (every TP rank has them)."""
    return expert_tp(layout) if layout.sequence_parallel else 1


def dense_mlp_activation_bytes(model: ModelShape, layout: Layout, scale: float) -> float:
    """The MLP's share of Korthikanti's per-layer figure (19 of 34 sbh with sequence
    parallelism; 3 + 16/t of 10 + 24/t without): what an MoE layer keeps instead."""
    sbh = model.seq_len / layout.cp * layout.micro_batch_size * model.hidden
    if layout.sequence_parallel:
        return 19 * sbh / layout.tp * scale
    return sbh * (3 + 16 / layout.tp) * scale


def moe_mlp_activation_bytes(model: ModelShape, layout: Layout, act_bytes: int,
                             imbalance: float) -> float:
    """What an MoE layer's router, experts and shared experts keep for the backward, for one
    micro-batch on the busiest rank (see the module docstring)."""
    h, t = model.hidden, tokens_per_rank(model, layout)
    etp, g = expert_tp(layout), gathered(layout)
    tensors = 3 if model.gated_mlp else 2
    routed = t * model.experts_per_token * imbalance
    experts = routed * (g * h + h + g * tensors * model.expert_ffn_hidden / etp) * act_bytes
    io = t * h * (act_bytes + 1)  # the MLP's input and its dropout mask, as in Korthikanti
    router = t * model.num_experts * ROUTER_BYTES
    shared = (layout.micro_batch_size * model.seq_len * tensors
              * model.shared_expert_ffn_hidden / layout.tp * act_bytes)
    return experts + io + router + shared


def moe_activation_extra(model: ModelShape, layout: Layout, checkpointing: str,
                         act_bytes: int, imbalance: float) -> float:
    """Bytes an MoE layer keeps beyond the dense layer `activation_bytes_per_layer` prices
    (negative when its experts keep less); none under full recompute, which keeps the input."""
    if checkpointing == "full" or not model.is_moe:
        return 0.0
    return (moe_mlp_activation_bytes(model, layout, act_bytes, imbalance)
            - dense_mlp_activation_bytes(model, layout, act_bytes / 2))


def dispatch_buffer_bytes(model: ModelShape, layout: Layout, act_bytes: int,
                          imbalance: float) -> float:
    """One MoE layer's dispatch send and receive buffers: the permuted tokens, twice."""
    if not model.is_moe:
        return 0.0
    routed = tokens_per_rank(model, layout) * model.experts_per_token * imbalance
    return 2 * routed * gathered(layout) * model.hidden * act_bytes


def gathered_expert_bytes(model: ModelShape, layout: Layout, act_bytes: int) -> float:
    """ZeRO-3's gathered weights of one MoE layer's local experts, current and prefetched."""
    local = model.num_experts / layout.ep * model.expert_params / expert_tp(layout)
    return 2 * act_bytes * local
