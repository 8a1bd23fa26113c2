"""Per-device memory of one training layout: model states, activations, buffers, reserve.

Pure arithmetic, in bytes. Sources:
- model states: AMSP (arXiv 2311.00257, §IV-D) `2Ψ/s_p + 2Ψ/s_g + 12Ψ/s_os` for mixed-precision
  Adam (ZeRO, arXiv 1910.02054, §3: K = 12 for fp32 master weights, momentum and variance). On
  CPU the built-in job trains in fp32: 4 + 4 + 8 bytes per parameter.
- activations and the micro-batches a pipeline keeps in flight: activations.py.
- pipeline: the busiest stage's layers with the first stage's embedding: high where the first
  stage holds fewer layers (orchestrator/pipeline_split.py).
- temporaries: the optimizer step's fp32 gradient of the owned shard (4Ψ/s_os, as DeepSpeed
  and InternEvo allocate), two gathered layers of weights when weights are sharded (current
  and prefetched), fp32 logits and their gradient, two gradient buckets.
- context parallelism: the K/V buffers of its exchange (context_parallel.py).
- reserve: FRAGMENTATION_RESERVE of the device for the caching allocator's fragmentation.
- mixture of experts: experts.py (expert weights over ep x etp, ZeRO over expert-DP).
- offload (offload.py): the optimizer shard and its fp32 gradient (and with optimizer+params the
  weight shard) move to `host`, bounded by the rank's share of its node's host memory.
- FP8 (precision.py): the cast weights of the layer in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.costmodel.activations import ACTIVATION_BYTES, activation_bytes
from orchestrator.costmodel.context_parallel import gradient_group, kv_buffer_bytes
from orchestrator.costmodel.experts import (
    dispatch_buffer_bytes,
    expert_factors,
    expert_params_per_rank,
    gathered_expert_bytes,
)
from orchestrator.costmodel.offload import offloads_optimizer, offloads_params
from orchestrator.costmodel.precision import cast_weight_bytes
from orchestrator.costmodel.zero_engine import DEEPSPEED, ZeroEngine
from orchestrator.presets import ModelShape
from orchestrator.space import Layout, ShardingFactors

GB = 1e9

# Bytes per parameter for (weights, gradients, optimizer states).
DTYPE_BYTES = {"bf16-mixed": (2, 2, 12), "fp32": (4, 4, 8)}

# Kept free: PyTorch's caching allocator loses 5-10% to fragmentation at peak; 8% is the middle.
FRAGMENTATION_RESERVE = 0.08


@dataclass(frozen=True)
class ModelStates:
    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def model_state_bytes_sharded(
    num_params: float, factors: ShardingFactors, dtype: str = "bf16-mixed"
) -> ModelStates:
    """AMSP's D_ms: each component divided by its own sharding factor."""
    p_bytes, g_bytes, os_bytes = DTYPE_BYTES[dtype]
    return ModelStates(
        params=p_bytes * num_params / factors.sp,
        grads=g_bytes * num_params / factors.sg,
        optimizer=os_bytes * num_params / factors.sos,
    )


def model_state_bytes(
    num_params: float, zero_stage: int, dp: int, dtype: str = "bf16-mixed"
) -> ModelStates:
    """ZeRO stage 0-3 over dp ranks. Ψ = 7.5e9, dp = 64: 120, 31.4, 16.6, 1.9 GB (ZeRO Fig. 1)."""
    factors = ShardingFactors.from_zero_stage(zero_stage, dp, 1)
    return model_state_bytes_sharded(num_params, factors, dtype)


def params_on_first_stage(model: ModelShape, layout: Layout) -> float:
    """Parameters outside the routed experts one rank of the first stage holds: its layers
    and the embedding, over tp (experts.py prices the experts; a dense model has none); the
    busiest stage's layer count, an upper bound (module docstring)."""
    layers = layout.busiest_stage_layers(model.num_layers)
    stage = layers * model.params_per_layer_outside_experts + model.embedding_params
    if layout.pp == 1:
        stage = model.num_params - model.expert_params_total
    return stage / layout.tp


@dataclass(frozen=True)
class MemoryBreakdown:
    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    overhead: float
    reserve: float
    # Offloaded states in host memory, and the host memory this rank may fill (0: unbounded).
    host: float = 0.0
    host_capacity: float = 0.0

    @property
    def total(self) -> float:
        return (self.params + self.grads + self.optimizer + self.activations + self.buffers
                + self.overhead + self.reserve)

    def as_gb(self) -> dict[str, float]:
        parts = ("params", "grads", "optimizer", "activations", "buffers", "overhead", "reserve")
        out = {f"{k}_gb": getattr(self, k) / GB for k in parts}
        out["total_gb"] = self.total / GB
        if self.host:
            out["host_gb"] = self.host / GB
        return out


def fits(memory: MemoryBreakdown, capacity_gb: float, used_scale: float = 1.0) -> bool:
    """Whether a device of `capacity_gb` holds `memory`: the one test of fit. What a
    measurement would see (all but the reserve) may be scaled by a measured or simulated
    ratio. Offloaded states must fit the rank's share of its node's host memory."""
    if memory.host_capacity and memory.host > memory.host_capacity:
        return False
    return fits_bytes(memory.total - memory.reserve, memory.reserve, capacity_gb, used_scale)


def fits_bytes(used, reserve, capacity_gb, used_scale=1.0, margin=0.0):
    """`fits` on the used bytes and the reserve (within capacity·(1 + margin)); element-wise."""
    return (used * used_scale + reserve) / GB <= capacity_gb * (1 + margin)


def overflow_scale(used, reserve, capacity_gb):
    """The used-memory scale from which `fits_bytes` says no (element-wise on arrays too)."""
    return (capacity_gb * GB - reserve) / used


def memory_per_device(
    model: ModelShape,
    layout: Layout,
    *,
    gpus_per_node: int,
    capacity_gb: float,
    runtime_overhead_gb: float,
    dtype: str = "bf16-mixed",
    flash_attention: bool = True,
    bucket_bytes: float = 25e6,
    runtime: ZeroEngine = DEEPSPEED,
    imbalance: float = 1.0,
    host: tuple[bool, float] = (True, 0.0),
) -> MemoryBreakdown:
    """Peak bytes on the busiest device (a rank of the first pipeline stage, with the most
    expert-laden stage's experts when they differ); `imbalance`: the busiest expert rank's
    load over the mean (coefficients.py)."""
    params = params_on_first_stage(model, layout)
    # The distributed optimizer shards over dp x cp, where the gradients reduce.
    factors = gradient_group(layout, gpus_per_node, runtime).factors(gpus_per_node,
                                             runtime.engine_of(layout.zero_stage))
    states = model_state_bytes_sharded(params, factors, dtype)
    experts = expert_params_per_rank(model, layout)
    expert_f = expert_factors(layout, gpus_per_node, runtime.engine_of) if experts else factors
    if experts:
        own = model_state_bytes_sharded(experts, expert_f, dtype)
        states = ModelStates(states.params + own.params, states.grads + own.grads,
                             states.optimizer + own.optimizer)
    pipelined = layout.pp > 1 and layout.grad_accum_steps > 1
    if (factors.engine == "torch" and factors.sg > 1 and layout.grad_accum_steps > 1
            and (runtime.grads_once_per_step or pipelined)):
        # FSDP2 with gradient sync off keeps each unit's unsharded gradient until the last
        # micro-batch reduce-scatters it (runtime.py): the whole gradient at the peak. A
        # pipeline stage turns sync off itself, whatever the trainer's loop does
        # (torch.distributed.pipelining's backward_maybe_with_nosync).
        states = replace(states, grads=DTYPE_BYTES[dtype][1] * (params + experts))
    if factors.engine == "torch" and factors.sp > 1 and pipelined:
        # ... and stops resharding after each micro-batch's backward, so the stage's gathered
        # weights stay until the step's last backward.
        states = replace(states, params=DTYPE_BYTES[dtype][0] * (params + experts))
    buffers = buffer_bytes(model, layout, dtype, bucket_bytes, (params, factors),
                           (experts, expert_f), imbalance) + cast_weight_bytes(model, layout)
    on_host = 0.0
    separate_host, host_capacity = host
    if offloads_optimizer(layout) and separate_host:
        fp32_grads = (4 * params / factors.sos + (4 * experts / expert_f.sos if experts else 0)
                      if dtype == "bf16-mixed" else 0.0)
        on_host = states.optimizer + fp32_grads
        buffers -= fp32_grads
        # DeepSpeed's ZeRO-Offload streams each bucket of gradients to the host as it is
        # reduced; PyTorch's trainers keep theirs until the step.
        grads = 0.0 if factors.engine == "deepspeed" else states.grads
        states = replace(states, optimizer=0.0, grads=grads)
        if offloads_params(layout):
            on_host += states.params
            states = replace(states, params=0.0)
    return MemoryBreakdown(
        params=states.params,
        grads=states.grads,
        optimizer=states.optimizer,
        activations=activation_bytes(model, layout, dtype, flash_attention, imbalance,
                                     runtime.selective_recompute),
        buffers=buffers,
        overhead=runtime_overhead_gb * GB,
        reserve=FRAGMENTATION_RESERVE * capacity_gb * GB,
        host=on_host,
        host_capacity=host_capacity,
    )


def buffer_bytes(model: ModelShape, layout: Layout, dtype: str,
                 bucket_bytes: float, dense: tuple, experts: tuple, imbalance: float) -> float:
    """Transients at the peak. `dense` and `experts` are (parameters, sharding factors) of
    the weights outside the routed experts and of the rank's experts (module docstring)."""
    (params, factors), (expert_params, expert_f) = dense, experts
    act_bytes = ACTIVATION_BYTES[dtype]
    buffers = 2 * bucket_bytes
    if dtype == "bf16-mixed":
        buffers += 4 * params / factors.sos  # fp32 gradient of the owned optimizer shard
        if expert_params:
            buffers += 4 * expert_params / expert_f.sos
    if factors.sp > 1:  # gathered + prefetched
        buffers += 2 * act_bytes * model.params_per_layer_outside_experts / layout.tp
    if expert_params and expert_f.sp > 1:
        buffers += gathered_expert_bytes(model, layout, act_bytes)
    if factors.secondary > 1:  # ZeRO++ hpZ keeps a second, node-local weight shard
        buffers += DTYPE_BYTES[dtype][0] * params / factors.secondary
    if layout.pp == 1:  # the last stage's logits share the device
        buffers += (2 * 4 * model.seq_len * layout.micro_batch_size * model.vocab_size
                    / layout.tp / layout.cp)
    if layout.cp > 1:  # keys and values of the cp exchange (context_parallel.py)
        buffers += kv_buffer_bytes(model, layout, act_bytes)
    if expert_params:
        buffers += dispatch_buffer_bytes(model, layout, act_bytes, imbalance)
    return buffers
