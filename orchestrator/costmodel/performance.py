"""Predicted step time of one layout: compute, pipeline bubble and communication, with overlap.

Pure arithmetic. Compute is the Megatron FLOPs formula (shared with the trial job through
`orchestrator.result`, recompute included) over peak × efficiency. Communication:
- TP: per layer and micro-batch, 2 all-reduces forward and 2 backward of the layer's
  activations (all-gather + reduce-scatter of the same volume with sequence parallelism),
  2 more when full recompute replays the forward (Narayanan et al. 2021, §3). On the torch
  engine each also pays DTensor's software cost (`tp_call_overhead_us`, profiled; 0 stock).
- PP: one send forward and one backward per micro-batch and stage boundary, v times more when
  interleaved; each TP rank sends 1/t of the activation (Megatron's scatter/gather, §4.1).
  Bubble (p-1)/(m+p-1) of the step, i.e. (p-1)/(v·m) of the compute.
- DP and sharding: AMSP's terms (arXiv 2311.00257, §IV-C) on the two-level DP mesh:
  T_p = M·Σ_modules [2·AG + RS](2Ψ_i) over (s0p, s1p)        per module and micro-batch
  T_g = (M-1)·(2Ψ/(U·s_p))·t(AR, U, s0g/s0p × s1g/s1p)          gradient sync when s_g > s_p
  T_os0 = (2Ψ/(U·s_p))·t(AR, U, s0dp/s0p × s1dp/s1p)            gradient sync for the optimizer
  T_os1 = (s_os/s_p)·t(BC, 2Ψ/s_os, s0os/s0p × s1os/s1p)        updated weights spread
          (DeepSpeed: bucketed all-gathers of 2Ψ/s_p instead of one broadcast per owner)
  with Ψ the parameters a rank holds after TP and PP. DDP and ZeRO-1/2/3 are points of this
  space (space/sharding.py). PyTorch's DDP and FSDP2 (the "torch" engine, which the
  built-in trainer and torchtitan run ZeRO stages on: runtime.py) put the same collectives
  in these terms by FSDP unit, not module (data_parallel.py), each call with
  FSDP2's software cost (`fsdp_call_overhead_us`, profiled; 0 stock).
  Overlap: see coefficients.py; the terms and their overlap are data_parallel.py's.
- Optimizer: one AdamW pass over the rank's shard of the weights (Ψ/s_os parameters) at the
  cluster's measured time per parameter (0 in the stock presets: unpriced).
- Mixture of experts (moe_time.py): the routed experts' GEMMs at their own shape and the
  busiest expert rank's load; the dispatch and combine all-to-alls; the experts' gradients
  and optimizer states over expert-DP, added to the terms above.
- Context parallelism (context_parallel.py): GEMMs of seq_len/cp rows per sequence, TP and
  PP moving a cp rank's tokens, the exposed K/V exchange, gradients over dp x cp.
- FP8 (precision.py): the linear GEMMs' share of compute at the FP8 peak, plus the casts.
- Offload (offload.py): the host transfers and host optimizer step, in place of the device's.
- Overlap and buckets (layout_terms.py): the layout's overlap switch and bucket size.
"""

from __future__ import annotations

from orchestrator.costmodel.activations import ACTIVATION_BYTES
from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.compute import gemm_efficiency
from orchestrator.costmodel.context_parallel import cp_comm
from orchestrator.costmodel.data_parallel import data_parallel_terms, exposed_dp
from orchestrator.costmodel.experts import expert_params_per_rank
from orchestrator.costmodel.layout_terms import layout_coefficients, offloaded_params
from orchestrator.costmodel.memory import params_on_first_stage
from orchestrator.costmodel.moe_time import compute_seconds, exposed_dispatch, moe_tp_layers
from orchestrator.costmodel.offload import offload_seconds
from orchestrator.costmodel.precision import compute_with_fp8
from orchestrator.costmodel.step_terms import StepTime
from orchestrator.costmodel.zero_engine import DEEPSPEED, ZeroEngine
from orchestrator.presets import Cluster, ModelShape
from orchestrator.result import model_flops_per_iteration
from orchestrator.space import Layout


def model_flops(model: ModelShape, tokens: int, layout: Layout | None = None,
                runtime: ZeroEngine = DEEPSPEED) -> float:
    """Model FLOPs of `tokens`; with `layout`, hardware FLOPs: the recompute `runtime` runs
    for it counted."""
    recompute = runtime.recompute_of(layout) if layout is not None else "none"
    fraction = layout.recompute_fraction(model.num_layers) if layout is not None else 1.0
    return model_flops_per_iteration(model, tokens, recompute, fraction)


def model_parallel_comm(
    model: ModelShape, layout: Layout, fabric: Fabric, gpus_per_node: int,
    act_bytes: int, tp_call_s: float = 0.0,
) -> tuple[float, float]:
    """Seconds of TP collectives and of PP sends per step (raw, before calibration); each TP
    collective with its runtime's software cost (`tp_call_s`: DTensor's, in the torch engine)."""
    m, p, v = layout.grad_accum_steps, layout.pp, layout.virtual_stages
    # A cp rank's activations are those of seq_len/cp tokens.
    layer_io = layout.micro_batch_size * model.seq_len * model.hidden * act_bytes / layout.cp
    tp_calls = 4 + 2 * layout.recompute_fraction(model.num_layers)
    tp_comm = 0.0
    if layout.tp > 1:
        tp_comm = tp_calls * moe_tp_layers(model, layout) * m * (
            fabric.all_reduce(layer_io, *layout.dims.node_split("tp", gpus_per_node)) + tp_call_s)
    pp_comm = 0.0
    if p > 1:
        crosses = layout.dims.stage_ranks >= gpus_per_node
        send = layer_io / layout.tp  # Megatron's scatter/gather: each TP rank sends 1/t
        pp_comm = 2 * v * m * fabric.send(send, crosses)
    return tp_comm, pp_comm


def step_time(
    model: ModelShape,
    layout: Layout,
    cluster: Cluster,
    *,
    gpus_per_node: int,
    dtype: str,
    coefficients: Coefficients,
    runtime: ZeroEngine = DEEPSPEED,
) -> StepTime:
    """Time of one optimizer step. Ranks are laid out tp fastest, then dp, then pp."""
    c = layout_coefficients(coefficients, layout, dtype)
    fabric = Fabric.of(cluster, gpus_per_node, c.bandwidth_efficiency)
    act_bytes = ACTIVATION_BYTES[dtype]
    m, p, v = layout.grad_accum_steps, layout.pp, layout.virtual_stages
    layers = layout.busiest_stage_layers(model.num_layers)

    flops = model_flops(model, layout.global_batch_size() * model.seq_len, layout, runtime)
    efficiency = gemm_efficiency(cluster, model, layout)
    compute = compute_with_fp8(
        model, layout, cluster,
        compute_seconds(cluster, model, layout, flops, efficiency, c.expert_load_imbalance),
        flops, params_on_first_stage(model, layout) + expert_params_per_rank(model, layout),
        runtime.recompute_of(layout))
    compute *= p * layers / model.num_layers  # every stage waits on the busiest
    bubble = compute * (p - 1) / (v * m)
    overhead = c.launch_overhead_s * layers * m

    # DTensor's software cost, in the built-in trainer's and torchtitan's TP (the torch engine).
    tp_call = cluster.tp_call_overhead_us * 1e-6 if runtime.zero_engine == "torch" else 0.0
    tp_comm, pp_comm = model_parallel_comm(model, layout, fabric, gpus_per_node, act_bytes,
                                           tp_call)
    # At link bandwidth alone: the rest is a fixed cost per call, scaled apart (α-β, Hockney).
    tp_bw, pp_bw = model_parallel_comm(model, layout, fabric.bandwidth_only(), gpus_per_node,
                                       act_bytes)
    bw_scale, lat_scale = c.scale_model_parallel_comm, c.scale_model_parallel_latency
    hidden = c.overlap_expert_comm * compute if runtime.overlaps_expert_comm else 0.0
    ep = exposed_dispatch(model, layout, fabric, gpus_per_node, act_bytes,
                          c.expert_load_imbalance, hidden, runtime.dispatch_per_node)

    flops_per_s = cluster.peak_tflops * 1e12 * efficiency
    context = cp_comm(model, layout, fabric, gpus_per_node, act_bytes, flops_per_s)
    weight_bytes = 2 if dtype == "bf16-mixed" else 4
    dp, optimizer, engine = data_parallel_terms(model, layout, cluster, fabric, gpus_per_node,
                                           weight_bytes, c, runtime)
    exposed = exposed_dp(dp, compute, layout, c, runtime, engine)
    return StepTime(
        compute_s=compute * c.scale_compute,
        bubble_s=bubble * c.scale_bubble,
        overhead_s=overhead,
        tp_comm_s=tp_bw * bw_scale + (tp_comm - tp_bw) * lat_scale,
        pp_comm_s=pp_bw * bw_scale + (pp_comm - pp_bw) * lat_scale,
        model_parallel_latency_s=(tp_comm - tp_bw + pp_comm - pp_bw + ep.latency_s) * lat_scale,
        dp_comm=dp,
        dp_exposed_s=exposed * c.scale_data_parallel_comm,
        optimizer_s=optimizer * c.scale_compute,
        ep_comm_s=ep.bandwidth_s * bw_scale + ep.latency_s * lat_scale,
        cp_comm_s=context * bw_scale,
        offload_s=offload_seconds(layout, cluster, c, gpus_per_node, *offloaded_params(
            model, layout, gpus_per_node, runtime), compute) * c.scale_compute,
    )
