"""Fit PyTorch's per-collective software costs to the profile's trainer steps: pure arithmetic.

The profile times `Trainer.step` of the built-in trainer at one shape as DDP, as ZeRO-3
(FSDP2) and as tensor parallelism, and DDP at smaller micro-batches
(jobs/profile_trainer_steps.py). The cost model, with the compute, links and optimizer already
fitted to bare steps and bare collectives, predicts each:
- DDP's step fixes the trainer's compute rate: what its loop adds over a bare step (DDP's
  hooks and bucket copies, autocast, the loss's all-reduce, Python; on a CPU also gloo's
  threads taking cores from the kernels) is charged as compute, by the factor that makes
  the model predict this step exactly. Where DDP was also timed with the same sequences in
  smaller micro-batches, the half-rate micro-batch of compute.py's shape model
  (`gemm_half_m`) and the factor are fitted to all of them: how a trial's step grows as its
  micro-batch shrinks is the trainer's (per-micro-batch loop and hooks, small GEMMs), which
  the bare steps of the grid set steeper or flatter from run to run.
- What the model, so corrected, still misses in the other two is charged per collective
  call: FSDP2's per all-gather and reduce-scatter of a unit (`fsdp_call_overhead_us`),
  DTensor's per tensor-parallel collective (`tp_call_overhead_us`). A layout measured no
  slower than predicted costs 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.costmodel.estimate import CostModel
from orchestrator.costmodel.zero_engine import PYTORCH
from orchestrator.presets import Cluster, ModelShape
from orchestrator.space import Layout

# Candidate half-rate sizes for compute.py's shape model (tokens, or hidden width).
HALVES = (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0)


@dataclass(frozen=True)
class TrainerOverheadFit:
    # Seconds of the trainer's compute over the bare step's (> 1: the trainer is slower).
    compute_scale: float
    # Per collective call; 0 where the profile did not time the layout.
    fsdp_call_overhead_us: float = 0.0
    tp_call_overhead_us: float = 0.0
    # Micro-batch tokens at which the trainer's compute reaches half its rate, where DDP was
    # timed at several micro-batch sizes (None: the bare-step grid's value stands).
    gemm_half_m: float | None = None


def profile_shape(model: dict) -> ModelShape:
    """The cost model's shape of the profile's model (jobs.model.ModelArgs as a dict)."""
    return ModelShape(name="profile", num_layers=model["num_layers"], hidden=model["hidden"],
                      num_heads=model["num_heads"], num_kv_heads=model.get("num_kv_heads"),
                      ffn_hidden=model["ffn_hidden"], vocab_size=model["vocab_size"],
                      seq_len=model["seq_len"], gated_mlp=model.get("gated_mlp", True))


def step_config(row: dict) -> Layout:
    return Layout(tp=row.get("tp", 1), dp=row.get("dp", 1),
                          zero_stage=row.get("zero_stage", 0),
                          micro_batch_size=row["micro_batch_size"],
                          grad_accum_steps=row.get("grad_accum_steps", 1))


def fit_trainer_overhead(cluster: Cluster, runtime: dict, ranks_per_node: int) -> TrainerOverheadFit | None:
    """`runtime`: the profile's {"model", "steps": [{"layout", tp/dp/zero_stage,
    "micro_batch_size", "seconds"}]}; None without a DDP step. `cluster` prices no software
    cost yet (its per-call overheads are 0). A layout's residual is divided by what one
    microsecond per call adds to its predicted step, so the calls are counted where the cost
    model counts them (performance.py)."""
    shape = profile_shape(runtime["model"])
    rows = runtime.get("steps", [])
    steps = {row["layout"]: row for row in rows if row["layout"] != "ddp"}
    ddp_rows = [row for row in rows if row["layout"] == "ddp"]
    if not ddp_rows:
        return None

    def step(c: Cluster, row: dict):
        cost = CostModel(shape, c, ranks_per_node, runtime=PYTORCH)
        return cost.estimate(step_config(row)).time

    # One micro-batch size: the grid's shape kept, the scale exact. Several: the half-rate
    # micro-batch (gemm_half_m) and the scale that fit the trainer's steps best.
    halves = HALVES if len({r["micro_batch_size"] for r in ddp_rows}) > 1 else (None,)
    fits = []
    for half_m in halves:
        shaped = cluster if half_m is None else cluster.model_copy(
            update={"gemm_half_m": half_m})
        scale, loss = compute_scale([(step(shaped, r), r["seconds"]) for r in ddp_rows])
        fits.append((loss, scale, half_m, shaped))
    _, scale, half_m, shaped = min(fits, key=lambda fit: fit[0])
    corrected = scaled_compute(shaped, scale)
    per_call: dict[str, float] = {}
    for layout, field in (("fsdp", "fsdp_call_overhead_us"), ("tp", "tp_call_overhead_us")):
        row = steps.get(layout)
        if row is None:
            continue
        bare = step(corrected, row).total_s
        seconds_per_us = step(corrected.model_copy(update={field: 1.0}), row).total_s - bare
        if seconds_per_us > 0:
            per_call[field] = max(0.0, (row["seconds"] - bare) / seconds_per_us)
    return TrainerOverheadFit(scale, gemm_half_m=half_m, **per_call)


def compute_scale(predicted: list[tuple]) -> tuple[float, float]:
    """The factor on compute that makes (predicted step, measured seconds) pairs agree, by
    relative least squares (exact for one pair), and the summed squared relative error."""
    pairs = [(t.compute_s, t.total_s - t.compute_s, y) for t, y in predicted]
    scale = (sum(c * (y - rest) / y**2 for c, rest, y in pairs)
             / sum(c * c / y**2 for c, _, y in pairs))
    scale = max(scale, 1e-3)
    return scale, sum(((rest + scale * c) / y - 1) ** 2 for c, rest, y in pairs)


def scaled_compute(cluster: Cluster, scale: float) -> Cluster:
    """`cluster` with its compute `scale` times slower: a lower efficiency, or where that
    would pass 1, efficiency 1 of a raised peak (as the compute fit does)."""
    efficiency = cluster.compute_efficiency / scale
    if efficiency <= 1.0:
        return cluster.model_copy(update={"compute_efficiency": efficiency})
    return cluster.model_copy(update={"compute_efficiency": 1.0,
                                      "peak_tflops": cluster.peak_tflops * efficiency})
