"""Compute efficiency by GEMM shape, and the modules whose weights a sharded step gathers.

Efficiency: a transformer layer's time is dominated by GEMMs whose rows are the tokens of a
micro-batch (m = micro-batch × sequence) and whose columns are the hidden size split by TP
(n = hidden / tp). Small GEMMs leave tensor cores idle (wave quantization, tile tails, kernel
launch and memory-bound epilogues), so efficiency rises with both dimensions and saturates:
    efficiency = compute_efficiency · m/(m + gemm_half_m) · n/(n + gemm_half_n)
with one set of the three constants per cluster preset (sources in presets/clusters.py).
This is what makes micro-batch size and TP real knobs: a larger micro-batch runs faster
GEMMs but leaves fewer micro-batches to fill the pipeline; a larger TP splits n. The routed
experts' grouped GEMMs have their own shape (moe_time.py): the tokens each local expert
receives as m, the expert's hidden size over ETP as n.

Modules: ZeRO-3, MiCS, ZeRO++ and AMSP gather and reduce-scatter weights per module, not per
step (DeepSpeed's ZeRO-3 fetches each submodule's parameters in its pre-forward hook; AMSP
§V-C launches the gathers of every module of the next layer). A transformer layer has 7
linear modules with a gated MLP (q, k, v, o, gate, up, down) and 4 without (qkv, dense,
fc1, fc2); norms are below DeepSpeed's `stage3_param_persistence_threshold` (1e5 elements)
and stay replicated. FSDP wraps a whole block: one unit per layer.
"""

from __future__ import annotations

from orchestrator.presets import Cluster, ModelShape
from orchestrator.space import Layout


def gemm_efficiency(cluster: Cluster, model: ModelShape, layout: Layout) -> float:
    """Fraction of peak the step's kernels reach at this layout's per-device GEMM shape
    (a cp rank's GEMMs have seq_len/cp rows per sequence)."""
    return shape_efficiency(cluster, layout.micro_batch_size * model.seq_len / layout.cp,
                            model.hidden / layout.tp)


def shape_efficiency(cluster: Cluster, m: float, n: float) -> float:
    """The shape rule on a GEMM of m rows and n columns (an expert's grouped GEMM too)."""
    eff = cluster.compute_efficiency
    if cluster.gemm_half_m:
        eff *= m / (m + cluster.gemm_half_m)
    if cluster.gemm_half_n:
        eff *= n / (n + cluster.gemm_half_n)
    return eff


def modules_per_layer(model: ModelShape, engine: str) -> int:
    """Units whose weights are gathered one collective each, per layer."""
    if engine == "torch":  # FSDP and HSDP: one unit per transformer block
        return 1
    return 7 if model.gated_mlp else 4


def causal_attention_discount(model: ModelShape, tokens: int) -> float:
    """Model FLOPs a causal mask spares: half the attention scores and values (Q·Kᵀ and
    softmax·V, forward and backward), which `model_flops_per_iteration` counts whole.
    Megatron-LM counts them half since March 2025 (MoE Parallel Folding's MFU)."""
    query = model.num_heads * model.head_dim
    return 0.5 * 3 * 4 * model.seq_len * query * model.num_layers * tokens
