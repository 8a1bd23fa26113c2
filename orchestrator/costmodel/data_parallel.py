"""The data-parallel terms of a step (performance.py): what the gradient reductions, weight
gathers and optimizer's collectives cost, in AMSP's four terms (performance.py's docstring
gives them), and what of that the step waits for once the trainer's overlap hides the rest
(coefficients.py; Megatron-Core's per-chunk overlap, `exposed_per_model_chunk`).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.compute import modules_per_layer
from orchestrator.costmodel.context_parallel import gradient_group
from orchestrator.costmodel.experts import (
    expert_factors,
    expert_layout,
    expert_params_per_rank,
    moe_layers_per_rank,
)
from orchestrator.costmodel.memory import params_on_first_stage
from orchestrator.costmodel.offload import offloads_optimizer
from orchestrator.costmodel.step_terms import DataParallelComm
from orchestrator.costmodel.zero_engine import DEEPSPEED, ZeroEngine
from orchestrator.presets import Cluster, ModelShape
from orchestrator.space import Layout, ShardingFactors, dp_mesh

# Bytes per element of the PyTorch trainers' float32 weights, gradients and reductions.
MASTER_BYTES = 4


def data_parallel_comm(
    params: float, layout: Layout, fabric: Fabric, gpus_per_node: int,
    weight_bytes: int, c: Coefficients, layers: int, modules: int,
    runtime: ZeroEngine = DEEPSPEED, fsdp_call_s: float = 0.0,
) -> DataParallelComm:
    f = layout.factors(gpus_per_node, runtime.engine_of(layout.zero_stage))
    s0dp, s1dp = dp_mesh(layout.dp, layout.tp, gpus_per_node)
    m = layout.grad_accum_steps
    bucket = c.bucket_bytes
    full = weight_bytes * params

    def runtime_bucket(dp_ranks: int, bytes_per_grad: int) -> float:
        """The trainer's own gradient bucket, unless the layout sets one (already in c)."""
        if layout.bucket_size is not None:
            return bucket
        return runtime.gradient_bucket_bytes(bucket, dp_ranks, bytes_per_grad)

    if f.engine == "torch":
        return pytorch_data_parallel_comm(params, weight_bytes, f, (s0dp, s1dp), m, layers,
                                          fabric, c, runtime, fsdp_call_s, runtime_bucket)
    t_p = 0.0
    if f.sp > 1:  # per gathered module i and micro-batch: 2·AG + RS of its 2Ψ_i bytes
        units = layers * modules
        unit = full / units
        # ZeRO++ hpZ gathers the backward's weights from the node-local secondary shard.
        backward_gather = (fabric.all_gather(unit, f.secondary) if f.secondary > 1
                           else fabric.all_gather(unit, f.s0p, f.s1p))
        forward_gather = fabric.all_gather(unit, f.s0p, f.s1p)
        # Full recompute replays the forward: AMSP keeps the weights it gathers for the
        # replay until the backward (§V-C); DeepSpeed releases them after each module's
        # forward, so the replay gathers once more.
        replays = (layout.recompute_fraction(layers * layout.pp) if f.engine == "deepspeed"
                   else 0.0)
        per_unit = (forward_gather * (1 + replays) + backward_gather
                    + fabric.reduce_scatter(unit, f.s0p, f.s1p))
        t_p = m * units * per_unit
    grads = full / f.sp
    t_g = 0.0
    if f.sg > f.sp and m > 1:
        t_g = (m - 1) * fabric.bucketed_all_reduce(grads, bucket, f.s0g // f.s0p, f.s1g // f.s1p)
    t_os0 = fabric.bucketed_all_reduce(grads, bucket, s0dp // f.s0p, s1dp // f.s1p)
    if runtime.zero1_reduce_scatters and f.sos > f.sg == 1:
        # Megatron-Core's distributed optimizer reduce-scatters into the optimizer's shards.
        bucket = runtime_bucket(s0dp * s1dp, weight_bytes)
        t_os0 = fabric.bucketed_reduce_scatter(grads, bucket, s0dp // f.s0p, s1dp // f.s1p)
    t_os1 = 0.0
    if f.sos > f.sp and f.engine == "amsp":  # AMSP: one broadcast per owner (uneven shards)
        t_os1 = f.sos // f.sp * fabric.broadcast(full / f.sos, f.s0os // f.s0p, f.s1os // f.s1p)
    elif f.sos > f.sp:  # DeepSpeed/PyTorch: bucketed all-gathers of the updated weights
        buckets = max(1.0, grads / c.gather_bucket_bytes)
        t_os1 = buckets * fabric.all_gather(grads / buckets, f.s0os // f.s0p, f.s1os // f.s1p)
    return DataParallelComm(t_p, t_g, t_os0, t_os1)


def pytorch_data_parallel_comm(
    params: float, weight_bytes: int, f: ShardingFactors, mesh: tuple[int, int], m: int,
    layers: int, fabric: Fabric, c: Coefficients, runtime: ZeroEngine,
    call_overhead_s: float = 0.0,
    bucket_bytes: Callable[[int, int], float] | None = None,
) -> DataParallelComm:
    """DDP, ZeroRedundancyOptimizer and FSDP2 (costmodel/zero_engine.py), in AMSP's four terms.
    FSDP2's units are the transformer blocks and the root module; each micro-batch gathers a
    unit's weights for its forward and, unless ZeRO-2 kept them, again for its backward (a
    full-recompute replay uses the backward's), and reduce-scatters its gradients when the
    trainer syncs them, each call with FSDP2's own software cost (`call_overhead_s`).
    Gradient syncs before the last micro-batch's are T_g (they hide behind the backward as
    T_g does); replicas (DDP, HSDP) all-reduce what the shard holds.
    Only FSDP2's gathers move `weight_bytes` (its `param_dtype`); the trainers keep float32
    weights and gradients under autocast and reduce in float32 (FSDP2's `reduce_dtype`,
    DDP's buckets), and ZeRO broadcasts the float32 weights it updated."""
    s0dp, s1dp = mesh
    full, master = weight_bytes * params, MASTER_BYTES * params
    syncs = 1 if runtime.grads_once_per_step else m
    t_p = 0.0
    if f.sg > 1:
        units = layers + 1
        gathers = 2 if f.sp > 1 else 1
        gather, scatter = full / units, master / units
        t_p = units * (m * gathers * (fabric.all_gather(gather, f.s0g, f.s1g) + call_overhead_s)
                       + syncs * (fabric.reduce_scatter(scatter, f.s0g, f.s1g)
                                  + call_overhead_s))
    bucket = (bucket_bytes(s0dp * s1dp // f.sg, MASTER_BYTES) if bucket_bytes is not None
              else c.bucket_bytes)
    replica_grads = master / f.sg
    if runtime.ddp_one_16bit_call and f.sg == 1:
        replica_grads = bucket = full  # zero_engine.py: Megatron-LM's local DDP of 2021
    replica_sync = fabric.bucketed_all_reduce(replica_grads, bucket, s0dp // f.s0g,
                                              s1dp // f.s1g)
    t_os1 = 0.0
    if f.sos > f.sg:  # ZeroRedundancyOptimizer: each owner broadcasts its bucket of weights
        t_os1 = f.sos * fabric.broadcast(master / f.sos, f.s0os, f.s1os)
    return DataParallelComm(t_p, (syncs - 1) * replica_sync, replica_sync, t_os1)


def exposed_data_parallel(
    comm: DataParallelComm, compute: float, m: int, c: Coefficients, engine: str = "amsp",
    chunks: int = 1, chunk_gap_micro_batches: int = 1, gather_chunks: int = 1,
) -> float:
    """What the overlap model leaves on the critical path (see coefficients.py); with
    `chunks` > 1, the once-per-step gradient reduction runs per model chunk, and with
    `gather_chunks` > 1 the weights' gather after the optimizer step
    (`exposed_per_model_chunk`)."""
    backward_per_micro = compute / m * 2 / 3
    forward_per_micro = compute / m / 3
    deepspeed = engine == "deepspeed"
    grad = c.overlap_grad_deepspeed if deepspeed else c.overlap_grad
    gathers = c.overlap_params_deepspeed if deepspeed else c.overlap_params
    broadcast = 0.0 if deepspeed else c.overlap_broadcast  # ZeRO's bucketed all-gather waits
    exposed = max(0.0, comm.t_p - gathers * compute)
    exposed += max(0.0, comm.t_g - grad * backward_per_micro * (m - 1))
    exposed += exposed_per_model_chunk(comm.t_os0, grad * backward_per_micro, chunks,
                                       chunk_gap_micro_batches)
    exposed += exposed_per_model_chunk(comm.t_os1, broadcast * forward_per_micro, gather_chunks,
                                       chunk_gap_micro_batches)
    return exposed


def exposed_per_model_chunk(comm_s: float, hidden_per_micro_s: float, chunks: int,
                            gap_micro_batches: int) -> float:
    """The exposed part of a data-parallel collective of `comm_s` that an interleaved
    pipeline runs per model chunk: each chunk's gradient reduction once its last micro-batch's
    backward is done, or each chunk's weight gather before its first forward (Megatron-Core's
    interleaved schedule; the gather is the reduction's mirror image in time).

    Each of the v chunks moves C = comm_s / v on one stream, behind its own last backward (a
    share `hidden_per_micro_s` / v of it hides, as one stage's reduction hides behind its last
    micro-batch's) and behind the backward the stage still runs afterwards. In the interleaved
    schedule's last round, chunks v-1 ... 0 each run the backward of `gap_micro_batches`
    micro-batches (the pipeline's p, or m if fewer), so chunk j is done j such rounds
    b' = gap · hidden / v before the end. A queue of the chunks' reductions then ends
    C - hidden/v + (v-1) · max(0, C - b') after the backward: C - hidden/v when the reductions
    keep pace with the backward (one chunk's left), the whole reduction less the backward it
    can hide behind when they do not. One chunk (v = 1) is the non-interleaved case,
    max(0, comm_s - hidden_per_micro_s)."""
    per_chunk = comm_s / chunks
    own = hidden_per_micro_s / chunks
    queued = (chunks - 1) * max(0.0, per_chunk - gap_micro_batches * own)
    return max(0.0, per_chunk - own + queued)


def data_parallel_terms(model: ModelShape, layout: Layout, cluster: Cluster, fabric: Fabric,
                   gpus_per_node: int, weight_bytes: int, c: Coefficients, runtime: ZeroEngine
                   ) -> tuple[DataParallelComm, float, str]:
    """The data-parallel terms, the optimizer step and the engine that runs them: the weights
    outside the routed experts over dp, the experts' over expert-DP."""
    params = params_on_first_stage(model, layout)
    dense = gradient_group(layout, gpus_per_node, runtime)  # over dp x cp (context_parallel.py)
    factors = dense.factors(gpus_per_node, runtime.engine_of(layout.zero_stage))
    # Each rank updates the optimizer shard it holds (every ZeRO scheme has s_os >= s_g >= s_p).
    optimizer = cluster.optimizer_ns_per_param * 1e-9 * params / factors.sos
    dp = data_parallel_comm(params, dense, fabric, gpus_per_node, weight_bytes, c,
                            layout.busiest_stage_layers(model.num_layers),
                            modules_per_layer(model, factors.engine), runtime,
                            cluster.fsdp_call_overhead_us * 1e-6)
    if model.is_moe:
        expert_dp, expert_optimizer = _expert_gradients(model, layout, cluster, fabric,
                                                        gpus_per_node, weight_bytes, c, runtime)
        dp, optimizer = dp + expert_dp, optimizer + expert_optimizer
    if offloads_optimizer(layout):
        optimizer = 0.0  # the host steps instead (offload.py)
    return dp, optimizer, factors.engine


def _expert_gradients(model: ModelShape, layout: Layout, cluster: Cluster,
                      fabric: Fabric, gpus_per_node: int, weight_bytes: int, c: Coefficients,
                      runtime: ZeroEngine) -> tuple[DataParallelComm, float]:
    """The routed experts' data-parallel terms, over expert-DP (their gradients reduce there,
    not over dp), and their optimizer step over the expert shard."""
    experts = expert_params_per_rank(model, layout)
    over_expert_dp = expert_layout(layout)
    f = expert_factors(layout, gpus_per_node, runtime.engine_of)
    modules = 1 if f.engine == "torch" else (3 if model.gated_mlp else 2)  # fc1 pair, fc2
    comm = data_parallel_comm(experts, over_expert_dp, fabric, gpus_per_node, weight_bytes, c,
                              moe_layers_per_rank(model, layout), modules, runtime,
                              cluster.fsdp_call_overhead_us * 1e-6)
    return comm, cluster.optimizer_ns_per_param * 1e-9 * experts / f.sos


def exposed_dp(dp, compute: float, layout: Layout, c: Coefficients,
                runtime: ZeroEngine, engine: str) -> float:
    """The data-parallel time the step waits for: a fitted exposure where calibration set
    one, else what the overlap model leaves uncovered by compute."""
    if c.dp_exposure is not None:
        gathers = c.dp_exposure if c.dp_exposure_gathers is None else c.dp_exposure_gathers
        return c.dp_exposure * (dp.total - dp.t_p) + gathers * dp.t_p
    ddp_overlaps = runtime.ddp_overlaps or bool(layout.overlap_comm)
    distributed_optimizer = (runtime.zero1_reduce_scatters and layout.zero_stage == 1
                             and not layout.sharding)
    if distributed_optimizer:
        engine = runtime.ddp_engine  # its reduction is its DDP's, and hides as that does
    ddp = layout.zero_stage == 0 and not layout.sharding
    overlaps = ddp_overlaps if ddp or distributed_optimizer else True  # a ZeRO engine's own
    hidden = c if overlaps else c.with_(overlap_grad=0.0)  # reduced after the backward
    per_chunk = runtime.grad_sync_per_model_chunk and layout.pp_schedule == "interleaved"
    interleaved = layout.virtual_stages if per_chunk else 1
    chunks = interleaved if (ddp or distributed_optimizer) and ddp_overlaps else 1
    gathers_hide = distributed_optimizer and runtime.param_gather_overlaps
    if gathers_hide:  # its weights gathered behind the next forward, as AMSP's broadcast
        hidden = hidden.with_broadcast_overlap()
    return exposed_data_parallel(dp, compute, layout.grad_accum_steps, hidden, engine,
                                 chunks, min(layout.pp, layout.grad_accum_steps),
                                 interleaved if gathers_hide else 1)
