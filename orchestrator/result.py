"""The trial-result schema and the FLOPs formula that defines its throughput metrics.

This is the one module of `orchestrator` that trial programs in `jobs/` may import: it needs
nothing but the standard library, so a trial runs on a compute node with only torch installed.
The FLOPs function lives here because `tflops_per_gpu` and `mfu` are defined by it; the cost
model calls the same function, so predicted and measured MFU are comparable.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

STATUSES = ("ok", "oom", "timeout", "failed", "infeasible")

# Marker for results printed on stdout by external trainers.
STDOUT_MARKER = "PARATUNE_RESULT"
# A trial log line that says what the trial is doing now (building, warm-up, timed steps);
# the live view shows the last one while the trial runs (orchestrator/trial/activity.py).
PHASE_LINE = "paratune phase: "


@dataclass
class TrialResult:
    """What one trial measured. Failures are data: `status` says how it ended, `error` why."""

    status: str
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    step_time_s: float | None = None
    step_time_p90_s: float | None = None
    peak_memory_gb: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    world_size: int | None = None
    error: str | None = None
    # Per-step wall times after warm-up, kept for the metric series in MLflow.
    step_times_s: list[float] = field(default_factory=list)
    # Anything else a trainer reported (e.g. predicted_memory_gb for infeasible configs).
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        for name in _NUMBERS:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"result field {name} is {type(value).__name__}, not a number")
        if self.error is not None and not isinstance(self.error, str):
            raise ValueError(f"result field error is {type(self.error).__name__}, not text")
        if not isinstance(self.step_times_s, list) or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) for t in self.step_times_s):
            raise ValueError("result field step_times_s is not a list of numbers")
        if not isinstance(self.extra, dict):
            raise ValueError(f"result field extra is {type(self.extra).__name__}, not a mapping")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def metric(self, name: str) -> float | None:
        value = getattr(self, name, None) if name in _FIELD_NAMES else self.extra.get(name)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialResult":
        known = {k: v for k, v in data.items() if k in _FIELD_NAMES}
        extra = dict(known.pop("extra", None) or {})
        extra.update({k: v for k, v in data.items() if k not in _FIELD_NAMES})
        known.setdefault("status", "ok")
        return cls(**known, extra=extra)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


_FIELD_NAMES = {f.name for f in dataclasses.fields(TrialResult)}
_NUMBERS = ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s",
            "step_time_p90_s", "peak_memory_gb", "loss_first", "loss_last", "world_size")

# Numeric fields that are logged as metrics.
METRIC_FIELDS = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "mfu",
    "step_time_s",
    "step_time_p90_s",
    "peak_memory_gb",
    "loss_first",
    "loss_last",
    "world_size",
)


def training_flops_per_iteration(
    *,
    tokens: int,
    seq_len: int,
    num_layers: int,
    hidden: int,
    vocab_size: int,
    ffn_hidden: int | None = None,
    gated_mlp: bool = False,
    kv_heads_ratio: float = 1.0,
    recompute: str = "none",
    recompute_fraction: float = 1.0,
    query_ratio: float = 1.0,
    moe_layers: int = 0,
    moe_ffn_hidden: int = 0,
    experts_per_token: int = 0,
    shared_expert_ffn_hidden: int = 0,
) -> float:
    """Model FLOPs of one training iteration (forward + backward) over `tokens` tokens.

    Megatron's accounting (Narayanan et al. 2021; Korthikanti et al. 2022): per layer and token
    the dense matmuls cost 2·(attention 2h² + 2h²·kv_ratio, MLP 2 or 3 matrices of h·ffn), the
    attention scores and values 2·2·s·h, plus 2·h·V for the logits; backward doubles the
    forward. With `gpt` shapes (ffn = 4h, ungated, kv_ratio 1) this equals the closed form
    72·B·s·l·h²·(1 + s/(6h) + V/(12lh)). `recompute="full"` adds one forward of the layers
    (the 96 variant), over `recompute_fraction` of the layers when only some recompute;
    "selective" adds one forward of the attention scores and values, the core attention that
    Megatron-Core's checkpoint replays once in the backward (Korthikanti et al. print
    1 + s/(3h), which adds three passes of it, not the one that runs); PER_OP_KINDS
    (torchtitan's per-op selective checkpointing) add one forward of every second matmul of
    each block (`replayed_matmul_macs`). MFU uses recompute="none" by convention; hardware
    FLOPs use the actual setting.

    Mixture of experts follows Megatron-LM's `num_floating_point_operations`: of the layers,
    `moe_layers` run `experts_per_token` experts of `moe_ffn_hidden` each plus the shared
    experts (`shared_expert_ffn_hidden` in all) instead of the dense MLP; the router is not
    counted. So MFU counts activated parameters, not total ones. `query_ratio` is the query
    projection over the hidden size (heads x head dim / hidden; 1 unless the head dim is set).
    """
    ffn = ffn_hidden if ffn_hidden is not None else 4 * hidden
    q = hidden * query_ratio
    attn_proj = 2 * hidden * q + 2 * hidden * q * kv_heads_ratio
    matrices = 3 if gated_mlp else 2
    dense_layers = num_layers - moe_layers
    mlp = matrices * hidden * (dense_layers * ffn + moe_layers * (
        experts_per_token * moe_ffn_hidden + shared_expert_ffn_hidden)) / num_layers
    dense_fwd = 2 * (attn_proj + mlp)
    scores_fwd = 2 * 2 * seq_len * q
    layer_fwd = dense_fwd + scores_fwd
    logits_fwd = 2 * hidden * vocab_size
    per_token = 3 * (num_layers * layer_fwd + logits_fwd)
    layers_again, attention_again = recompute_forwards(recompute, recompute_fraction)
    per_token += num_layers * (layers_again * layer_fwd + attention_again * scores_fwd)
    if recompute in PER_OP_KINDS:
        kv, fused = q * kv_heads_ratio, recompute == PER_OP_SELECTIVE_FUSED_QKV
        dense_mlp = replayed_matmul_macs(hidden, q, kv, ffn, gated_mlp, fused)
        shared_mlp = replayed_matmul_macs(hidden, q, kv, shared_expert_ffn_hidden, gated_mlp,
                                          fused)
        per_token += 2 * (dense_layers * dense_mlp + moe_layers * shared_mlp)
    return float(per_token) * tokens


# torchtitan's per-op selective activation checkpointing (`activation-checkpoint:selective`,
# torchtitan/distributed/activation_checkpoint.py SelectiveAC): a block keeps its input and the
# outputs of its attention and of every odd-numbered matmul (1st, 3rd, ...), and its backward
# replays every even-numbered matmul and the element-wise ops. Which matmuls those are depends
# on whether the model projects queries, keys and values apart (torchtitan of 2024-2025) or in
# one fused wqkv (torchtitan 0.3's Llama 3 and Qwen3 flavors, `fuse_qkv=True`).
# Megatron-Core's "selective" replays core attention alone.
PER_OP_SELECTIVE = "selective-per-op"
PER_OP_SELECTIVE_FUSED_QKV = "selective-per-op-fused-qkv"
PER_OP_KINDS = (PER_OP_SELECTIVE, PER_OP_SELECTIVE_FUSED_QKV)


def block_matmuls(hidden: int, q_dim: float, kv_dim: float, ffn: int, gated_mlp: bool,
                  fused_qkv: bool = False) -> list[tuple[float, float]]:
    """(input, output) widths of a transformer block's matmuls in the order its forward runs
    them: wq, wk, wv (or one wqkv), wo, then w1, w3, w2 (gated) or w1, w2; `ffn` 0 leaves the
    MLP out (a mixture-of-experts layer without shared experts: its routed experts run grouped
    matmuls, which torchtitan's count of matmuls does not include)."""
    projections = ([(hidden, q_dim + 2 * kv_dim)] if fused_qkv
                   else [(hidden, q_dim), (hidden, kv_dim), (hidden, kv_dim)])
    matmuls = [*projections, (q_dim, hidden)]
    if ffn:
        matmuls += [(hidden, ffn), (hidden, ffn)] if gated_mlp else [(hidden, ffn)]
        matmuls.append((ffn, hidden))
    return matmuls


def replayed_matmul_macs(hidden: int, q_dim: float, kv_dim: float, ffn: int,
                         gated_mlp: bool, fused_qkv: bool = False) -> float:
    """Multiply-accumulates per token of the matmuls a per-op selective backward replays:
    the even-numbered ones of `block_matmuls`."""
    matmuls = block_matmuls(hidden, q_dim, kv_dim, ffn, gated_mlp, fused_qkv)
    return sum(a * b for a, b in matmuls[1::2])


def recompute_forwards(recompute: str, recompute_fraction: float = 1.0) -> tuple[float, float]:
    """Forwards the backward replays, per layer: of the whole layer (full recompute, over
    `recompute_fraction` of the layers) and of core attention alone (selective recompute's
    one replay of the scores and values)."""
    if recompute == "full":
        return recompute_fraction, 0.0
    if recompute == "selective":
        return 0.0, 1.0
    if recompute == "none" or recompute in PER_OP_KINDS:  # per-op: training_flops_per_iteration
        return 0.0, 0.0
    raise ValueError(f"recompute must be none, selective, full or one of {PER_OP_KINDS}, "
                     f"not {recompute!r}")


@lru_cache(maxsize=1024)  # the cost model asks for every estimate
def moe_layer_count(num_layers: int, num_experts: int, first_dense_layers: int = 0,
                    moe_layer_freq: int = 1) -> int:
    """Layers whose MLP is a mixture of experts: every `moe_layer_freq`-th layer (Megatron's
    `--moe-layer-freq`, layer i when i % freq == 0) after the first dense ones (DeepSeek's
    `first_k_dense_replace`)."""
    if num_experts <= 0:
        return 0
    return sum(1 for i in range(first_dense_layers, num_layers) if i % moe_layer_freq == 0)


def model_flops_per_iteration(model: Any, tokens: int, recompute: str = "none",
                              recompute_fraction: float = 1.0) -> float:
    """`training_flops_per_iteration` for a model given by its fields (the cost model's
    `ModelShape` and the trial job's `ModelArgs` share their names), so both count alike."""
    heads = model.num_heads
    head_dim = model.kv_channels or model.hidden // heads
    moe_layers = moe_layer_count(model.num_layers, model.num_experts, model.first_dense_layers,
                                 model.moe_layer_freq)
    return training_flops_per_iteration(
        tokens=tokens, seq_len=model.seq_len, num_layers=model.num_layers, hidden=model.hidden,
        vocab_size=model.vocab_size, ffn_hidden=model.ffn_hidden, gated_mlp=model.gated_mlp,
        kv_heads_ratio=(model.num_kv_heads or heads) / heads, recompute=recompute,
        recompute_fraction=recompute_fraction, query_ratio=heads * head_dim / model.hidden,
        moe_layers=moe_layers,
        moe_ffn_hidden=model.moe_ffn_hidden or model.ffn_hidden,
        experts_per_token=model.experts_per_token if moe_layers else 0,
        shared_expert_ffn_hidden=model.shared_expert_ffn_hidden,
    )
