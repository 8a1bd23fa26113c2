"""Per-device memory of one training layout: model states, activations, runtime reserve.

Pure arithmetic, in bytes. Sources:
- model states: Rajbhandari et al., ZeRO (SC'20, arXiv 1910.02054), §3: with mixed-precision
  Adam a parameter costs 2 (fp16/bf16 weight) + 2 (gradient) + K = 12 (fp32 master, momentum,
  variance) bytes. On CPU the built-in job trains in fp32: 4 + 4 + 8 bytes.
- activations: Korthikanti et al., Reducing Activation Recomputation (arXiv 2205.05198), Table 2,
  for 16-bit activations (doubled for fp32).
- pipeline: with 1F1B the first stage holds activations of `pp` micro-batches at once
  (Narayanan et al. 2021, §2.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.presets import ModelShape
from orchestrator.search_spaces import ParallelConfig

GB = 1e9

# Bytes per parameter for (weights, gradients, optimizer states).
PRECISION_BYTES = {
    "bf16-mixed": (2, 2, 12),
    "fp32": (4, 4, 8),
}
ACTIVATION_BYTES = {"bf16-mixed": 2, "fp32": 4}

# Fraction of the device kept free for allocator fragmentation and communication buffers.
# PyTorch's caching allocator commonly loses 5-10% to fragmentation at peak.
FRAGMENTATION_RESERVE = 0.08


@dataclass(frozen=True)
class ModelStates:
    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def model_state_bytes(
    num_params: float, zero_stage: int, dp: int, precision: str = "bf16-mixed"
) -> ModelStates:
    """Bytes per device of weights, gradients and optimizer states under a ZeRO stage.

    Stage 1 shards the optimizer states over dp, stage 2 also the gradients, stage 3 also the
    weights. With Ψ = 7.5e9 and dp = 64: 120, 31.4, 16.6 and 1.9 GB (ZeRO paper, Fig. 1).
    """
    p_bytes, g_bytes, os_bytes = PRECISION_BYTES[precision]
    shard = lambda sharded: dp if sharded else 1  # noqa: E731 - reads as the paper's table
    return ModelStates(
        params=p_bytes * num_params / shard(zero_stage >= 3),
        grads=g_bytes * num_params / shard(zero_stage >= 2),
        optimizer=os_bytes * num_params / shard(zero_stage >= 1),
    )


def activation_bytes_per_layer(
    model: ModelShape, micro_batch: int, tp: int, checkpointing: str, precision: str
) -> float:
    """Activations one transformer layer keeps for backward, for one micro-batch.

    Korthikanti et al., Table 2 (16-bit): no recompute with tensor parallelism t:
    sbh(10 + 24/t + 5as/(ht)); selective recompute drops the s² attention term; full
    recompute keeps only the layer input, 2sbh.
    """
    s, b, h, a = model.seq_len, micro_batch, model.hidden, model.num_heads
    scale = ACTIVATION_BYTES[precision] / 2
    if checkpointing == "full":
        return 2 * s * b * h * scale
    per_layer = s * b * h * (10 + 24 / tp)
    if checkpointing == "none":
        per_layer += 5 * a * s * s * b / tp
    return per_layer * scale


def logits_bytes(model: ModelShape, micro_batch: int, tp: int) -> float:
    """fp32 logits and their gradient at the output layer, split over tp."""
    return 2 * 4 * model.seq_len * micro_batch * model.vocab_size / tp


@dataclass(frozen=True)
class MemoryBreakdown:
    params: float
    grads: float
    optimizer: float
    activations: float
    overhead: float
    reserve: float

    @property
    def total(self) -> float:
        return (
            self.params + self.grads + self.optimizer + self.activations + self.overhead
            + self.reserve
        )

    def as_gb(self) -> dict[str, float]:
        parts = {k: getattr(self, k) for k in (
            "params", "grads", "optimizer", "activations", "overhead", "reserve")}
        return {f"{k}_gb": v / GB for k, v in {**parts, "total": self.total}.items()}


def memory_per_device(
    model: ModelShape,
    config: ParallelConfig,
    *,
    capacity_gb: float,
    runtime_overhead_gb: float,
    precision: str = "bf16-mixed",
) -> MemoryBreakdown:
    """Peak bytes on the busiest device (the first pipeline stage)."""
    params_per_rank = model.num_params / (config.tp * config.pp)
    states = model_state_bytes(params_per_rank, config.zero_stage, config.dp, precision)
    layers_per_stage = model.num_layers // config.pp
    in_flight = min(config.pp, config.grad_accum_steps) if config.pp > 1 else 1
    per_layer = activation_bytes_per_layer(
        model, config.micro_batch_size, config.tp, config.activation_checkpointing, precision
    )
    activations = per_layer * layers_per_stage * in_flight
    if config.pp == 1:
        activations += logits_bytes(model, config.micro_batch_size, config.tp)
    if config.activation_checkpointing == "full":
        # Backward recomputes one layer at a time, whose full activations are live then.
        activations += activation_bytes_per_layer(
            model, config.micro_batch_size, config.tp, "none", precision
        )
    return MemoryBreakdown(
        params=states.params,
        grads=states.grads,
        optimizer=states.optimizer,
        activations=activations,
        overhead=runtime_overhead_gb * GB,
        reserve=FRAGMENTATION_RESERVE * capacity_gb * GB,
    )
