"""One call that predicts everything about a layout: memory, fit, step time and throughput."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.costmodel.memory import GB, MemoryBreakdown, memory_per_device
from orchestrator.costmodel.performance import StepTime, model_flops, step_time
from orchestrator.presets import Cluster, ModelShape
from orchestrator.search_spaces import ParallelConfig


def precision_for(cluster: Cluster) -> str:
    """The built-in job trains in fp32 on CPU (gloo) and in bf16 mixed precision on GPUs."""
    return "fp32" if cluster.device == "cpu" else "bf16-mixed"


@dataclass(frozen=True)
class Estimate:
    config: ParallelConfig
    memory: MemoryBreakdown
    time: StepTime
    capacity_gb: float
    tokens_per_step: int
    model_flops_per_step: float
    peak_tflops: float

    @property
    def memory_gb(self) -> float:
        return self.memory.total / GB

    @property
    def fits(self) -> bool:
        return self.memory_gb <= self.capacity_gb

    @property
    def step_time_s(self) -> float:
        return self.time.total_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.config.world_size / 1e12

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu / self.peak_tflops

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "fits": self.fits,
            "memory": {**self.memory.as_gb(), "capacity_gb": self.capacity_gb},
            "time": {
                "compute_s": self.time.compute_s,
                "bubble_s": self.time.bubble_s,
                "dp_comm_s": self.time.dp_comm_s,
                "tp_comm_s": self.time.tp_comm_s,
                "pp_comm_s": self.time.pp_comm_s,
                "step_time_s": self.step_time_s,
            },
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s / self.config.world_size,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
        }


def estimate(
    model: ModelShape,
    cluster: Cluster,
    config: ParallelConfig,
    *,
    gpus_per_node: int | None = None,
    efficiency: float | None = None,
) -> Estimate:
    precision = precision_for(cluster)
    tokens = config.global_batch_size() * model.seq_len
    memory = memory_per_device(
        model, config, capacity_gb=cluster.memory_gb,
        runtime_overhead_gb=cluster.runtime_overhead_gb, precision=precision,
    )
    time = step_time(
        model, config, cluster, gpus_per_node=gpus_per_node or cluster.gpus_per_node,
        precision=precision, efficiency=efficiency,
    )
    return Estimate(
        config=config,
        memory=memory,
        time=time,
        capacity_gb=cluster.memory_gb,
        tokens_per_step=tokens,
        model_flops_per_step=model_flops(model, tokens),
        peak_tflops=cluster.peak_tflops,
    )
