"""Predicted step time of one layout: compute, communication and the pipeline bubble.

Pure arithmetic. Compute is the Megatron FLOPs formula (shared with the trial job through
`orchestrator.result`) over peak × efficiency. Communication uses ring collectives on a two-level
topology: a group inside one node runs at the device's intra-node bandwidth, a group that spans
nodes at the node's network bandwidth shared by its devices. Overlap is not modelled here: the
terms add up, which is pessimistic for DP gradient reduction that frameworks overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.presets import Cluster, ModelShape
from orchestrator.result import training_flops_per_iteration
from orchestrator.search_spaces import ParallelConfig


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    bubble_s: float
    dp_comm_s: float
    tp_comm_s: float
    pp_comm_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.bubble_s + self.dp_comm_s + self.tp_comm_s + self.pp_comm_s


def model_flops(model: ModelShape, tokens: int, recompute: str = "none") -> float:
    return training_flops_per_iteration(
        tokens=tokens,
        seq_len=model.seq_len,
        num_layers=model.num_layers,
        hidden=model.hidden,
        vocab_size=model.vocab_size,
        ffn_hidden=model.ffn_hidden,
        gated_mlp=model.gated_mlp,
        kv_heads_ratio=model.kv_heads / model.num_heads,
        recompute=recompute,
    )


def _link(cluster: Cluster, group_size: int, stride: int, gpus_per_node: int) -> tuple[float, float]:
    """(bandwidth bytes/s per rank, latency s) for a group of `group_size` ranks `stride` apart."""
    if group_size * stride <= gpus_per_node:
        return cluster.intra_node_gbps * 1e9, cluster.intra_node_latency_us * 1e-6
    per_device = cluster.inter_node_gbps / min(gpus_per_node, group_size * stride)
    return per_device * 1e9, cluster.inter_node_latency_us * 1e-6


def ring_time(op: str, nbytes: float, group: int, bandwidth: float, latency: float) -> float:
    """α-β ring collective time: all-reduce moves 2(p-1)/p of the buffer, the others (p-1)/p."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    factor = 2 if op == "all_reduce" else 1
    steps = factor * (group - 1)
    return steps * latency + factor * (group - 1) / group * nbytes / bandwidth


def step_time(
    model: ModelShape,
    config: ParallelConfig,
    cluster: Cluster,
    *,
    gpus_per_node: int,
    precision: str = "bf16-mixed",
    efficiency: float | None = None,
) -> StepTime:
    """Time of one optimizer step. Ranks are laid out tp fastest, then dp, then pp."""
    eff = efficiency if efficiency is not None else cluster.compute_efficiency
    act_bytes = 2 if precision == "bf16-mixed" else 4
    grad_bytes = act_bytes
    tokens = config.global_batch_size() * model.seq_len
    flops = model_flops(model, tokens, config.activation_checkpointing)
    compute = flops / config.world_size / (cluster.peak_tflops * 1e12 * eff)

    # Pipeline: m micro-batches through p stages take (m + p - 1) slots of one micro-batch.
    m, p = config.grad_accum_steps, config.pp
    bubble = compute * (p - 1) / m

    # Tensor parallel: 2 all-reduces forward, 2 backward per layer and micro-batch.
    layer_io = config.micro_batch_size * model.seq_len * model.hidden * act_bytes
    bw, lat = _link(cluster, config.tp, 1, gpus_per_node)
    layers_per_stage = model.num_layers // p
    tp_comm = 4 * layers_per_stage * m * ring_time("all_reduce", layer_io, config.tp, bw, lat)

    # Pipeline point-to-point: activations forward and gradients backward per micro-batch.
    pp_comm = 0.0
    if p > 1:
        bw, lat = _link(cluster, 2, config.tp * config.dp, gpus_per_node)
        pp_comm = 2 * (m + p - 2) * (lat + layer_io / config.tp / bw)

    # Data parallel: gradients all-reduced (ZeRO 0-2: reduce-scatter + all-gather of the same
    # volume); ZeRO-3 also all-gathers weights in forward and backward: 1.5x the volume.
    shard_bytes = model.num_params / (config.tp * p) * grad_bytes
    bw, lat = _link(cluster, config.dp, config.tp, gpus_per_node)
    dp_comm = ring_time("all_reduce", shard_bytes, config.dp, bw, lat)
    if config.zero_stage == 3:
        dp_comm *= 1.5
    return StepTime(compute, bubble, dp_comm, tp_comm, pp_comm)
