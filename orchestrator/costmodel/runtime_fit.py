"""Fit PyTorch's per-collective software costs to the profile's trainer steps: pure arithmetic.

The profile times `Trainer.step` of the built-in trainer at one shape as DDP, as ZeRO-3 (FSDP2)
and as tensor parallelism (jobs/profile_runtime.py). The cost model, with the compute, links
and optimizer already fitted to bare steps and bare collectives, predicts each:
- DDP's step fixes the trainer's compute rate: what its loop adds over a bare step (DDP's
  hooks and bucket copies, autocast, the loss's all-reduce, Python; on a CPU also gloo's
  threads taking cores from the kernels) is charged as compute, by the factor that makes
  the model predict this step exactly.
- What the model, so corrected, still misses in the other two is charged per collective
  call: FSDP2's per all-gather and reduce-scatter of a unit (`fsdp_call_overhead_us`),
  DTensor's per tensor-parallel collective (`tp_call_overhead_us`). A layout measured no
  slower than predicted costs 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.costmodel.estimate import CostModel
from orchestrator.costmodel.runtime import runtime_of_trainer
from orchestrator.presets import Cluster, ModelShape
from orchestrator.search_spaces import ParallelConfig


@dataclass(frozen=True)
class RuntimeFit:
    # Seconds of the trainer's compute over the bare step's (> 1: the trainer is slower).
    compute_scale: float
    # Per collective call; 0 where the profile did not time the layout.
    fsdp_call_overhead_us: float = 0.0
    tp_call_overhead_us: float = 0.0


def profile_shape(model: dict) -> ModelShape:
    """The cost model's shape of the profile's model (jobs.model.ModelArgs as a dict)."""
    return ModelShape(name="profile", num_layers=model["num_layers"], hidden=model["hidden"],
                      num_heads=model["num_heads"], num_kv_heads=model.get("num_kv_heads"),
                      ffn_hidden=model["ffn_hidden"], vocab_size=model["vocab_size"],
                      seq_len=model["seq_len"], gated_mlp=model.get("gated_mlp", True))


def step_config(row: dict) -> ParallelConfig:
    return ParallelConfig(tp=row.get("tp", 1), dp=row.get("dp", 1),
                          zero_stage=row.get("zero_stage", 0),
                          micro_batch_size=row["micro_batch_size"])


def fit_runtime(cluster: Cluster, runtime: dict, ranks_per_node: int) -> RuntimeFit | None:
    """`runtime`: the profile's {"model", "steps": [{"layout", tp/dp/zero_stage,
    "micro_batch_size", "seconds"}]}; None without a DDP step. `cluster` prices no software
    cost yet (its per-call overheads are 0). A layout's residual is divided by what one
    microsecond per call adds to its predicted step, so the calls are counted where the cost
    model counts them (performance.py)."""
    shape = profile_shape(runtime["model"])
    steps = {row["layout"]: row for row in runtime.get("steps", [])}
    if "ddp" not in steps:
        return None

    def step(c: Cluster, row: dict):
        cost = CostModel(shape, c, ranks_per_node, runtime=runtime_of_trainer("builtin"))
        return cost.estimate(step_config(row)).time

    ddp = step(cluster, steps["ddp"])
    rest = ddp.total_s - ddp.compute_s
    scale = max(steps["ddp"]["seconds"] - rest, 1e-3 * ddp.compute_s) / ddp.compute_s
    corrected = scaled_compute(cluster, scale)
    per_call: dict[str, float] = {}
    for layout, field in (("fsdp", "fsdp_call_overhead_us"), ("tp", "tp_call_overhead_us")):
        row = steps.get(layout)
        if row is None:
            continue
        bare = step(corrected, row).total_s
        seconds_per_us = step(corrected.model_copy(update={field: 1.0}), row).total_s - bare
        if seconds_per_us > 0:
            per_call[field] = max(0.0, (row["seconds"] - bare) / seconds_per_us)
    return RuntimeFit(scale, **per_call)


def scaled_compute(cluster: Cluster, scale: float) -> Cluster:
    """`cluster` with its compute `scale` times slower: a lower efficiency, or where that
    would pass 1, efficiency 1 of a raised peak (as the compute fit does)."""
    efficiency = cluster.compute_efficiency / scale
    if efficiency <= 1.0:
        return cluster.model_copy(update={"compute_efficiency": efficiency})
    return cluster.model_copy(update={"compute_efficiency": 1.0,
                                      "peak_tflops": cluster.peak_tflops * efficiency})
