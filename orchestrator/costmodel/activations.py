"""Activation memory of one training layout on the busiest device: what each transformer layer
keeps for backward, by its recompute, and how many micro-batches' worth a pipeline holds.

Pure arithmetic, in bytes. Sources:
- per layer: Korthikanti et al. (arXiv 2205.05198), Table 2, 16-bit activations (doubled
  for fp32). FlashAttention keeps no s×s scores, so the 5as/h term goes.
- pipeline: GPipe keeps all m micro-batches in flight; 1F1B keeps p on the first stage;
  interleaving adds a (p-1)/(p·v) share (Narayanan et al., arXiv 2104.04473, §2.2). The
  busiest stage's layers (orchestrator/pipeline_split.py).
- context parallelism: a rank's activations are those of seq_len/cp tokens.
- mixture of experts: the router's, dispatch's and experts' activations in place of the dense
  MLP's (experts.py).
- torchtitan's "selective" is per-op (orchestrator/result.py PER_OP_KINDS): a block keeps its
  input, its attention's output and the outputs of its odd-numbered matmuls
  (`per_op_kept_elements`; wq, wv, w1, w2, or wqkv, w1, w2 where the model fuses its query,
  key and value projections), and its backward replays the rest of the block.
"""

from __future__ import annotations

from orchestrator.costmodel.experts import (
    moe_activation_extra,
    moe_layers_per_rank,
    moe_mlp_activation_bytes,
)
from orchestrator.presets import ModelShape
from orchestrator.result import PER_OP_KINDS, PER_OP_SELECTIVE_FUSED_QKV, block_matmuls
from orchestrator.space import Layout

ACTIVATION_BYTES = {"bf16-mixed": 2, "fp32": 4}


def activation_bytes_per_layer(
    model: ModelShape,
    micro_batch: int,
    tp: int,
    checkpointing: str,
    dtype: str,
    *,
    sequence_parallel: bool = False,
    flash_attention: bool = True,
) -> float:
    """Activations one transformer layer keeps for backward, for one micro-batch.

    Korthikanti Table 2: no recompute sbh(10 + 24/t + 5as/(ht)), with sequence parallelism
    (sbh/t)(34 + 5as/h); selective recompute drops the 5as/h term; full recompute keeps the
    layer input, 2sbh (2sbh/t with sequence parallelism).
    """
    s, b, h, a = model.seq_len, micro_batch, model.hidden, model.num_heads
    scale = ACTIVATION_BYTES[dtype] / 2
    sbh = s * b * h
    if checkpointing == "full":
        return 2 * sbh / (tp if sequence_parallel else 1) * scale
    keep_scores = checkpointing == "none" and not flash_attention
    scores = 5 * a * s / h if keep_scores else 0.0
    if sequence_parallel:
        return sbh / tp * (34 + scores) * scale
    return sbh * (10 + 24 / tp + scores / tp) * scale


def per_op_kept_elements(model: ModelShape, tp: int, sequence_parallel: bool,
                         fused_qkv: bool = False) -> tuple[float, float]:
    """Elements per token one block keeps under per-op selective checkpointing, as (attention
    with the block's input, MLP). Column-parallel outputs (wq, wk, wv or wqkv, w1, w3) are
    split over tp; a row-parallel matmul (wo, w2) outputs a full-width partial sum, and with
    sequence parallelism its reduce-scatter, a saved communication op, keeps 1/tp of it as
    well."""
    h = model.hidden
    q, kv = model.num_heads * model.head_dim, model.kv_heads * model.head_dim
    matmuls = block_matmuls(h, q, kv, model.ffn_hidden, model.gated_mlp, fused_qkv)
    wo = 1 if fused_qkv else 3
    row_parallel = {wo, len(matmuls) - 1}  # wo and w2
    scattered = tp > 1 and sequence_parallel
    kept = [0.0] * len(matmuls)
    for i, (_, width) in enumerate(matmuls):
        if i % 2 == 0:  # the 1st, 3rd, ... matmul: saved
            kept[i] = width if i in row_parallel else width / tp
        if i in row_parallel and scattered:
            kept[i] += width / tp
    block_input = h / tp if sequence_parallel else h
    attention = block_input + q / tp + sum(kept[:wo + 1])  # + the attention's output
    return attention, sum(kept[wo + 1:])


def per_op_layer_bytes(model: ModelShape, layout: Layout, act_bytes: int,
                       mlp: bool = True, fused_qkv: bool = False) -> float:
    """What one block keeps for one micro-batch under per-op selective checkpointing; without
    `mlp`, its attention part alone (a mixture-of-experts layer's MLP is priced apart)."""
    attention, dense_mlp = per_op_kept_elements(model, layout.tp, layout.sequence_parallel,
                                                fused_qkv)
    tokens = model.seq_len / layout.cp * layout.micro_batch_size
    return tokens * (attention + (dense_mlp if mlp else 0.0)) * act_bytes


def in_flight_micro_batches(layout: Layout) -> float:
    """Micro-batches whose activations the first pipeline stage holds at its peak."""
    p, m = layout.pp, layout.grad_accum_steps
    if p == 1:
        return 1.0
    if layout.pp_schedule == "gpipe":
        return float(m)
    held = float(min(p, m))
    if layout.pp_schedule == "interleaved":
        held *= 1 + (p - 1) / (p * layout.virtual_stages)
    return held


def activation_bytes(model: ModelShape, layout: Layout, dtype: str,
                     flash_attention: bool, imbalance: float = 1.0,
                     selective: str = "selective") -> float:
    """Activations the first stage holds at its peak: each layer's, by its recompute, times
    the micro-batches in flight; MoE layers keep their experts' instead of a dense MLP's.
    `selective`: what the trainer's "selective" replays (ZeroEngine.selective_recompute)."""
    act_bytes = ACTIVATION_BYTES[dtype]

    def per_layer(checkpointing: str) -> float:  # a rank holds seq_len/cp tokens
        if checkpointing in PER_OP_KINDS:
            return per_op_layer_bytes(model, layout, act_bytes,
                                      fused_qkv=checkpointing == PER_OP_SELECTIVE_FUSED_QKV)
        return activation_bytes_per_layer(
            model, layout.micro_batch_size, layout.tp, checkpointing, dtype,
            sequence_parallel=layout.sequence_parallel, flash_attention=flash_attention,
        ) / layout.cp

    layers = layout.busiest_stage_layers(model.num_layers)
    recomputed = layout.recompute_fraction(model.num_layers) * layers
    mode = {"full": "none", "selective": selective}.get(layout.activation_checkpointing,
                                                        layout.activation_checkpointing)
    kept = per_layer(mode)
    stored = recomputed * per_layer("full") + (layers - recomputed) * kept
    moe_layers = moe_layers_per_rank(model, layout)
    if moe_layers and mode in PER_OP_KINDS:  # routed experts' grouped matmuls are saved
        extra = (per_op_layer_bytes(model, layout, act_bytes, mlp=False,
                                    fused_qkv=mode == PER_OP_SELECTIVE_FUSED_QKV)
                 + moe_mlp_activation_bytes(model, layout, act_bytes, imbalance) - kept)
        stored += extra * moe_layers
    elif moe_layers:
        extra = moe_activation_extra(model, layout, mode, act_bytes, imbalance)
        stored += extra * moe_layers * (layers - recomputed) / layers
    activations = stored * in_flight_micro_batches(layout)
    if mode in PER_OP_KINDS:
        # A block's backward replays what it did not keep; its full activations are live then.
        activations += max(0.0, per_layer("none") - kept)
    if recomputed:
        # Backward recomputes one layer at a time; its full activations are live then.
        activations += per_layer("none")
        if moe_layers:
            activations += max(0.0, moe_activation_extra(model, layout, "none", act_bytes,
                                                         imbalance))
    return activations
