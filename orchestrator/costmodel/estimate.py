"""`CostModel`: everything predicted about a layout (memory, fit, step time, throughput).

A CostModel is a model shape on a cluster at a node size, with coefficients that calibration
can refit; `estimate()` is the one-call form with the default coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.compute import causal_attention_discount, gemm_efficiency
from orchestrator.costmodel.fit_verdict import (
    DOES_NOT_FIT,
    MEMORY_MARGIN,
    memory_margin,
    memory_verdict,
)
from orchestrator.costmodel.memory import GB, MemoryBreakdown, fits, memory_per_device
from orchestrator.costmodel.moe_time import step_efficiency
from orchestrator.costmodel.offload import host_capacity_bytes, offload_unsupported
from orchestrator.costmodel.precision import fp8_unsupported
from orchestrator.costmodel.performance import StepTime, model_flops, step_time
from orchestrator.costmodel.zero_engine import DEEPSPEED, ZeroEngine
from orchestrator.presets import Cluster, ModelShape
from orchestrator.space import Layout


def dtype_for(cluster: Cluster) -> str:
    """The number format the cost model prices model states and activations in: the built-in
    job trains in fp32 on CPU (gloo) and in bf16 mixed precision on GPUs. Not the layout's
    `precision` knob, which picks the GEMMs' recipe (bf16 or an FP8 one) on top of it."""
    return "fp32" if cluster.device == "cpu" else "bf16-mixed"


@dataclass(frozen=True)
class Estimate:
    config: Layout
    memory: MemoryBreakdown
    time: StepTime
    capacity_gb: float
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_tflops: float
    # Fraction of peak the kernels reach at this layout's GEMM shape (costmodel/compute.py).
    compute_efficiency: float = 1.0
    # Model FLOPs a causal mask spares (compute.py), for the MFU Megatron-LM prints now.
    causal_discount: float = 0.0
    # Why the cluster cannot run this layout at all (an FP8 recipe without FP8 cores), or None.
    unsupported: str | None = None
    # How far over capacity a layout is `risky` rather than pruned (fit_verdict.py).
    memory_margin: float = MEMORY_MARGIN

    @property
    def memory_gb(self) -> float:
        return self.memory.total / GB

    @property
    def memory_gb_used(self) -> float:
        """Memory a measurement would see: everything but the fragmentation reserve."""
        return (self.memory.total - self.memory.reserve) / GB

    @property
    def fits(self) -> bool:
        return self.unsupported is None and fits(self.memory, self.capacity_gb)

    def fits_scaled(self, memory_scale: float) -> bool:
        """Fit with used memory scaled by a calibrated ratio of measured to predicted."""
        return self.unsupported is None and fits(self.memory, self.capacity_gb, memory_scale)

    @property
    def memory_verdict(self) -> str:
        """"fits", "risky" or "does_not_fit" (fit_verdict.py): memory alone, so "fits" here and
        `fits` differ only for a layout the cluster cannot run (`unsupported`)."""
        return self.memory_verdict_scaled(1.0)

    def memory_verdict_scaled(self, memory_scale: float) -> str:
        return memory_verdict(self.memory, self.capacity_gb, memory_scale, self.memory_margin)

    @property
    def prunable(self) -> bool:
        """Whether a campaign skips this layout unmeasured: the cluster cannot run it, or its
        memory is beyond the model's margin. A risky layout is measured."""
        return self.prunable_scaled(1.0)

    def prunable_scaled(self, memory_scale: float) -> bool:
        return (self.unsupported is not None
                or self.memory_verdict_scaled(memory_scale) == DOES_NOT_FIT)

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
        """Model FLOPs utilization: recompute not counted (the trial job's convention)."""
        return self.tflops_per_gpu / self.peak_tflops

    @property
    def mfu_causal(self) -> float:
        """MFU with causal attention counted half: Megatron-LM's convention since March
        2025, which MoE Parallel Folding's figures use."""
        flops = self.model_flops_per_step - self.causal_discount
        return flops / self.step_time_s / self.config.world_size / 1e12 / self.peak_tflops

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilization: recompute counted, as Megatron-LM reports TFLOPS."""
        hw = self.hardware_flops_per_step / self.step_time_s / self.config.world_size / 1e12
        return hw / self.peak_tflops

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "fits": self.fits,
            "memory_verdict": self.memory_verdict,
            "memory": {**self.memory.as_gb(), "capacity_gb": self.capacity_gb},
            "time": self.time.as_dict(),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s / self.config.world_size,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_causal": self.mfu_causal,
            "hfu": self.hfu,
            "compute_efficiency": self.compute_efficiency,
        }


@dataclass(frozen=True)
class CostModel:
    model: ModelShape
    cluster: Cluster
    gpus_per_node: int
    flash_attention: bool = True
    coefficients: Coefficients = field(default_factory=Coefficients)
    # How the campaign's trainer runs ZeRO stages (zero_engine.py); DeepSpeed's by default.
    runtime: ZeroEngine = DEEPSPEED

    @property
    def dtype(self) -> str:
        return dtype_for(self.cluster)

    def fits(self, layout: Layout, memory_scale: float = 1.0) -> bool:
        """`Estimate.fits` without the step time, for callers that only ask about memory."""
        if self.unsupported(layout):
            return False
        return fits(self.memory(layout), self.cluster.memory_gb, memory_scale)

    def unsupported(self, layout: Layout) -> str | None:
        """Why this cluster cannot run the layout at all (FP8 without FP8 cores, offload
        without a host link), or None."""
        return fp8_unsupported(self.cluster, layout) or offload_unsupported(self.cluster, layout)

    def memory(self, layout: Layout) -> MemoryBreakdown:
        bucket = self.coefficients.bucket_bytes
        if layout.bucket_size is not None:  # elements of the gradients' dtype
            bucket = layout.bucket_size * (4 if self.dtype == "fp32" else 2)
        return memory_per_device(
            self.model, layout, gpus_per_node=self.gpus_per_node,
            capacity_gb=self.cluster.memory_gb,
            runtime_overhead_gb=self.cluster.runtime_overhead_gb, dtype=self.dtype,
            flash_attention=self.flash_attention, bucket_bytes=bucket,
            runtime=self.runtime, imbalance=self.coefficients.expert_load_imbalance,
            host=(self.cluster.device != "cpu",
                  host_capacity_bytes(self.cluster, self.gpus_per_node)),
        )

    def estimate(self, layout: Layout) -> Estimate:
        tokens = layout.global_batch_size() * self.model.seq_len
        hardware_flops = model_flops(self.model, tokens, layout, self.runtime)
        time = step_time(
            self.model, layout, self.cluster, gpus_per_node=self.gpus_per_node,
            dtype=self.dtype, coefficients=self.coefficients, runtime=self.runtime,
        )
        return Estimate(
            config=layout,
            memory=self.memory(layout),
            time=time,
            capacity_gb=self.cluster.memory_gb,
            tokens_per_step=tokens,
            model_flops_per_step=model_flops(self.model, tokens),
            hardware_flops_per_step=hardware_flops,
            peak_tflops=self.cluster.peak_tflops,
            compute_efficiency=step_efficiency(
                self.cluster, self.model, layout, hardware_flops,
                gemm_efficiency(self.cluster, self.model, layout),
                self.coefficients.expert_load_imbalance),
            causal_discount=causal_attention_discount(self.model, tokens),
            unsupported=self.unsupported(layout),
            memory_margin=memory_margin(self.cluster.device),
        )

    def with_coefficients(self, coefficients: Coefficients) -> "CostModel":
        return replace(self, coefficients=coefficients)


def estimate(
    model: ModelShape,
    cluster: Cluster,
    layout: Layout,
    *,
    gpus_per_node: int | None = None,
    flash_attention: bool = True,
) -> Estimate:
    cost = CostModel(model, cluster, gpus_per_node or cluster.gpus_per_node, flash_attention)
    return cost.estimate(layout)
