"""FP8 recipes: which FLOPs run on FP8 tensor cores, and what the casts around them cost.

Pure arithmetic. The recipes (Transformer Engine's through Megatron-Core, torchao's through
torchtitan and the built-in trainer) run the transformer layers' linear GEMMs in FP8 and keep the
attention scores and values (FlashAttention) and the output layer in bf16:
- GEMMs: the linear FLOPs (`fp8_gemm_flops`) run at `fp8_peak_tflops` instead of the bf16
  peak, at the same fraction of peak and the same shape rule (compute.py): an assumption, as
  cuBLASLt's large FP8 GEMMs reach about the share of the FP8 peak that BF16 ones reach of
  theirs. The rest of the step keeps its bf16 time.
- casts: every linear quantizes its input in the forward and its output gradient in the
  backward, plus its weight once per micro-batch. Each is a pass over HBM in bf16 and out in FP8:
  CAST_BYTES per element by the scaling the recipe uses: dynamic per-tensor or per-row scaling
  (tensorwise, rowwise) reads the tensor once for its amax, again to cast (2 + 2 bytes in, 1 out),
  and writes the transposed FP8 copy its backward GEMM takes (1 in, 1 out): 7 bytes; delayed
  scaling takes the amax from its history, with no amax pass: 5; blockwise and MXFP8 compute the
  scale of each block in the cast itself and quantize the transpose from bf16 again: 6. At the
  device's memory bandwidth (`hbm_gbps`) times MEMORY_EFFICIENCY.
- memory: the cast weights of the layer in flight (FP8 and its transpose, 2 bytes per parameter);
  saved activations are left at bf16 (torchao saves the bf16 input; Transformer Engine's FP8 input
  would be smaller).
A device with no FP8 peak (`fp8_peak_tflops` 0: CPUs, A100, MI250X) runs no FP8 layout:
`fp8_unsupported` says why, and the campaign records such a layout `infeasible`, never run.
"""

from __future__ import annotations

from orchestrator.presets import Cluster, ModelShape
from orchestrator.result import recompute_forwards
from orchestrator.space import Layout

CAST_BYTES = {"fp8-tensorwise": 7, "fp8-rowwise": 7, "fp8-delayed": 5, "fp8-blockwise": 6,
              "mxfp8": 6}
# Element-wise kernels reach 80-90% of HBM's peak (STREAM-like copies on A100 and H100);
# the low end, as the casts are short kernels between GEMMs.
MEMORY_EFFICIENCY = 0.8


def is_fp8(layout: Layout) -> bool:
    return layout.precision != "bf16"


def fp8_unsupported(cluster: Cluster, layout: Layout) -> str | None:
    """Why this cluster cannot run the layout's FP8 recipe, or None."""
    if not is_fp8(layout) or cluster.fp8_peak_tflops > 0:
        return None
    return (f"precision {layout.precision}: {cluster.name}'s {cluster.device} has no FP8 tensor "
            "cores (fp8_peak_tflops 0); FP8 needs H100/H200-class GPUs (CUDA 8.9+) or MI300")


def attention_and_logit_flops(model: ModelShape, tokens: int, layout: Layout,
                              recompute: str) -> float:
    """The step's FLOPs that stay bf16: attention scores and values and the logits, counted
    as `model_flops_per_iteration` counts them (`recompute`, what the trainer replays,
    included)."""
    scores_fwd = 4 * model.seq_len * model.num_heads * model.head_dim
    layers_again, attention_again = recompute_forwards(
        recompute, layout.recompute_fraction(model.num_layers))
    passes = 3 + layers_again + attention_again
    logits = 3 * 2 * model.hidden * model.vocab_size
    return (model.num_layers * scores_fwd * passes + logits) * tokens


def linear_io_per_token(model: ModelShape) -> float:
    """Elements a token's activations hold at the inputs and outputs of one layer's linears,
    averaged over dense and MoE layers: what the casts pass over, per token and layer."""
    h, q, kv = model.hidden, model.num_heads * model.head_dim, model.kv_heads * model.head_dim
    attention = (h + q) + 2 * (h + kv) + (q + h)
    matrices = 3 if model.gated_mlp else 2

    def mlp(ffn: int) -> int:
        return matrices * (h + ffn)

    moe = model.moe_layers
    dense = (model.num_layers - moe) * mlp(model.ffn_hidden)
    routed = moe * (model.experts_per_token * mlp(model.expert_ffn_hidden)
                    + (mlp(model.shared_expert_ffn_hidden) if model.shared_expert_ffn_hidden else 0))
    return attention + (dense + routed) / model.num_layers


def cast_seconds(model: ModelShape, layout: Layout, cluster: Cluster,
                 layer_params: float) -> float:
    """Seconds a rank spends casting to FP8 in one step: its tokens' linear inputs and output
    gradients (again for a recomputed forward's inputs), and its layers' weights per
    micro-batch. `layer_params`: the linear weights of the rank's layers."""
    if not is_fp8(layout) or not cluster.hbm_gbps:
        return 0.0
    layers = layout.busiest_stage_layers(model.num_layers)
    tokens = layout.micro_batch_size * layout.grad_accum_steps * model.seq_len / layout.cp
    passes = 1 + layout.recompute_fraction(model.num_layers) / 2  # a replay casts inputs again
    activations = tokens * layers * linear_io_per_token(model) / layout.tp * passes
    weights = layout.grad_accum_steps * layer_params
    nbytes = CAST_BYTES[layout.precision] * (activations + weights)
    return nbytes / (cluster.hbm_gbps * 1e9 * MEMORY_EFFICIENCY)


def fp8_compute_seconds(bf16_seconds: float, fp8_share: float, cluster: Cluster) -> float:
    """A step's compute with `fp8_share` of its FLOPs (by bf16 time) on FP8 tensor cores."""
    speedup = cluster.fp8_peak_tflops / cluster.peak_tflops
    return bf16_seconds * (1 - fp8_share + fp8_share / speedup)


def compute_with_fp8(model: ModelShape, layout: Layout, cluster: Cluster,
                     bf16_seconds: float, flops: float, stage_params: float,
                     recompute: str) -> float:
    """A step's compute under the layout's FP8 recipe: the linear GEMMs' share (by FLOPs) at
    the FP8 peak, plus the casts; unchanged in bf16 or without FP8 cores."""
    if not is_fp8(layout) or not cluster.fp8_peak_tflops:
        return bf16_seconds
    tokens = layout.global_batch_size() * model.seq_len
    share = max(0.0, 1 - attention_and_logit_flops(model, tokens, layout, recompute) / flops)
    return (fp8_compute_seconds(bf16_seconds, share, cluster)
            + cast_seconds(model, layout, cluster, stage_params))


def cast_weight_bytes(model: ModelShape, layout: Layout) -> float:
    """The FP8 weight and its transpose of the layer in flight (memory module docstring)."""
    if not is_fp8(layout):
        return 0.0
    return 2 * model.params_per_layer_outside_experts / layout.tp
