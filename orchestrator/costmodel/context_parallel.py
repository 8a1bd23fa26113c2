"""Context parallelism (cp): each sequence split over cp ranks, and the attention exchanges
that splitting costs.

Each cp rank holds seq_len/cp tokens of every sequence in 2·cp head-tail chunks
(Megatron-Core), so causal work is balanced; the world is tp × pp × cp × dp, and the cp ranks
sit between dp and tp: a cp group's ranks are tp apart, so it stays in a node while
tp × cp <= gpus_per_node. Three ways to exchange keys and values (per layer, micro-batch):
- p2p (ring attention, Megatron-Core's default): cp - 1 sends of a K/V block forward, about
  twice that backward (dK/dV travel back too); each send overlaps the attention of the block
  in hand (≈ 4·b·(s/cp)²·h_q/tp FLOPs, halved by the causal mask), so only what outlasts it
  is exposed. Two blocks are in flight (the one computed on, the one arriving).
- a2a (DeepSpeed-Ulysses, arXiv 2309.14509): four all-to-alls forward (q, k, v, out) and
  four backward, each moving (cp-1)/cp of b·(s/cp)·h/tp, not overlapped; attention then runs
  on the full sequence for heads/cp heads.
- allgather (Llama 3's choice): an all-gather of K and V forward, a reduce-scatter of their
  gradients backward; the whole sequence's K/V of a layer is live.
Parameter gradients reduce over dp × cp ranks (Megatron-Core and torchtitan both do), and
the distributed optimizer shards over the same group.
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.presets import ModelShape
from orchestrator.space import Layout, ShardingFactors, dp_mesh


def gradient_group(layout: Layout, gpus_per_node: int = 1,
                   runtime: ZeroEngine | None = None) -> Layout:
    """The layout whose dp is the group parameter gradients reduce over: dp × cp. A runtime
    that shards over the cp ranks whatever the stage (torchtitan applies FSDP over
    dp_shard × cp) runs stages 0 and 1 as HSDP: sharded over cp, replicated over dp."""
    if layout.cp == 1:
        return layout
    group = replace(layout, dp=layout.dims.gradient_group, cp=1)
    if (runtime is not None and runtime.shards_over_cp and layout.sharding is None
            and layout.zero_stage < 2):
        mesh = dp_mesh(group.dp, layout.tp, gpus_per_node)
        group = replace(group, sharding=ShardingFactors.named("hsdp", *mesh, group=layout.cp))
    return group


def cp_mesh(layout: Layout, gpus_per_node: int) -> tuple[int, int]:
    """(ranks in a node, nodes) of a cp group: its ranks are tp apart."""
    return layout.dims.node_split("cp", gpus_per_node)


def kv_width(model: ModelShape) -> int:
    return model.kv_heads * model.head_dim


def kv_buffer_bytes(model: ModelShape, layout: Layout, act_bytes: int) -> float:
    """The keys and values one layer's cp exchange keeps live on a rank (0 at cp 1)."""
    cp, tp, b, s = layout.cp, layout.tp, layout.micro_batch_size, model.seq_len
    if cp == 1:
        return 0.0
    if layout.cp_comm_type == "allgather":  # the whole sequence's K and V
        return 2 * b * s * kv_width(model) / tp * act_bytes
    if layout.cp_comm_type == "a2a":  # full-sequence q, k, v and out of heads/cp
        width = (2 * model.num_heads + 2 * model.kv_heads) * model.head_dim
        return b * s * width / tp / cp * act_bytes  # heads split over tp, then over cp
    return 2 * 2 * b * s / cp * kv_width(model) / tp * act_bytes  # two K/V blocks in flight


def block_attention_seconds(model: ModelShape, layout: Layout, flops_per_s: float
                            ) -> float:
    """Forward attention of one ring step: a chunk's queries against one K/V block, the
    causal mask sparing half (head-tail chunks balance it)."""
    chunk = layout.micro_batch_size * model.seq_len / layout.cp
    query = model.num_heads * model.head_dim / layout.tp
    return 0.5 * 4 * chunk * (model.seq_len / layout.cp) * query / flops_per_s


def cp_comm_per_layer(model: ModelShape, layout: Layout, fabric: Fabric,
                      gpus_per_node: int, act_bytes: int, flops_per_s: float) -> float:
    """Exposed seconds of one layer's cp exchange for one micro-batch, forward and backward
    (a full-recompute replay repeats the forward's)."""
    cp = layout.cp
    if cp == 1:
        return 0.0
    p0, p1 = cp_mesh(layout, gpus_per_node)
    b, s, tp = layout.micro_batch_size, model.seq_len, layout.tp
    replay = layout.recompute_fraction(model.num_layers)
    if layout.cp_comm_type == "a2a":
        chunk = b * s / cp * model.hidden / tp * act_bytes
        return (4 * (1 + replay) + 4) * fabric.all_to_all(chunk, p0, p1)
    if layout.cp_comm_type == "allgather":
        kv = 2 * b * s * kv_width(model) / tp * act_bytes
        return (1 + replay) * fabric.all_gather(kv, p0, p1) + fabric.reduce_scatter(kv, p0, p1)
    block = 2 * b * s / cp * kv_width(model) / tp * act_bytes  # K and V of one chunk
    send = fabric.send(block, p1 > 1)
    attention = block_attention_seconds(model, layout, flops_per_s)
    forward = (cp - 1) * max(0.0, send - attention)
    backward = (cp - 1) * max(0.0, 2 * send - 2 * attention)  # dK/dV back; 2x the FLOPs
    return forward * (1 + replay) + backward


def cp_comm(model: ModelShape, layout: Layout, fabric: Fabric, gpus_per_node: int,
            act_bytes: int, flops_per_s: float) -> float:
    """Exposed seconds of the cp exchanges per step on a rank: its layers × micro-batches."""
    if layout.cp == 1:
        return 0.0
    layers = layout.busiest_stage_layers(model.num_layers)
    per_layer = cp_comm_per_layer(model, layout, fabric, gpus_per_node, act_bytes, flops_per_s)
    return layers * layout.grad_accum_steps * per_layer
