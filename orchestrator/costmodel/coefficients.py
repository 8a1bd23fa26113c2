"""The cost model's free coefficients: defaults with their reasons, refit by calibration.

The overlap model (how much communication hides behind compute), per engine:
- AMSP/InternEvo, DDP and FSDP: DP gradient reduction (AMSP T_os0, T_g) overlaps the backward
  that produces the gradients, up to `overlap_grad` of the last micro-batch's backward (T_os0)
  or of the earlier micro-batches' backward (T_g). 0.6, not 1: overlapped NCCL kernels take
  SMs and memory bandwidth from the matmuls, and AMSP Table V's 7B ablation (0.57 with
  overlap, 0.45 without, at 64 GPUs and M = 1) puts the hidden share near 0.6.
- DeepSpeed (ZeRO-1/2/3, MiCS, ZeRO++): none (`overlap_grad_deepspeed` = 0). AMSP measured
  these engines losing most of their MFU to communication at scale (§III, §VI-B).
- Weight gathers (T_p: all-gathers and reduce-scatters per module and micro-batch) stay on
  the critical path in every engine (`overlap_params` = 0): prefetching the next module
  competes with the current one's reduce-scatter for the links; crediting AMSP's prefetch
  makes the planner contradict AMSP's Table IV (docs/costmodel.md, Table V).
- The optimizer's parameter broadcast (T_os1) is exposed (`overlap_broadcast` = 0): AMSP
  turned its overlap off in the end-to-end runs (AMSP §VI-A). Its Table V ablation ran with
  it on (dropping it cost 7B 5% MFU), behind the next step's first forward:
  `with_broadcast_overlap` gives it the share gradient reduction gets (the same contention).
- TP collectives sit between dependent matmuls and are exposed; PP sends are small and counted.
- MoE dispatch all-to-alls are exposed unless the trainer overlaps them (zero_engine.py), then
  hidden behind up to `overlap_expert_comm` of the compute.
Calibration scales each term (compute, bubble, TP/PP comm's bandwidth and latency apart),
replaces the overlap model of DP communication by a measured exposed fraction, and fits a
fixed cost per layer and micro-batch (kernel launches, Python); see calibration.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Coefficients:
    # AMSP/InternEvo and PyTorch (DDP, FSDP) engines: the share of the backward that hides
    # gradient reduction, of compute that hides weight gathers, of a forward the broadcast.
    overlap_grad: float = 0.6
    overlap_params: float = 0.0
    overlap_broadcast: float = 0.0
    # DeepSpeed's ZeRO/MiCS/ZeRO++: measured to hide little (AMSP §III, Fig. 2: ZeRO-3 and
    # MiCS lose most of their MFU to communication at scale).
    overlap_grad_deepspeed: float = 0.0
    overlap_params_deepspeed: float = 0.0
    # NCCL bus bandwidth reaches ~80% of the link rate for large messages (nccl-tests on
    # DGX A100/H100 and Slingshot report 75-85%).
    bandwidth_efficiency: float = 0.8
    # Gradient bucket size U: PyTorch DDP's default bucket_cap_mb = 25.
    bucket_bytes: float = 25e6
    # DeepSpeed's allgather_bucket_size default, 5e8 elements of 2 bytes: ZeRO-1/2 gather
    # updated weights in buckets this size (one all-gather each, not AMSP's broadcasts).
    gather_bucket_bytes: float = 1e9
    # Fixed time per layer per micro-batch (kernel launches, Python); ~0 for large models.
    launch_overhead_s: float = 20e-6
    # Set by calibration: the measured fraction of raw data-parallel communication that stays
    # exposed, replacing the overlap model above (None = use the overlap model); weight
    # gathers (T_p) get their own, as their overlap is another mechanism (None = dp_exposure).
    dp_exposure: float | None = None
    dp_exposure_gathers: float | None = None
    # Mixture of experts (moe_time.py). The busiest expert rank's load over the mean
    # (max/mean) in dropless top-k routing with an auxiliary balancing loss: Megatron-Core's
    # Mixtral 8x22B benchmark on H100 (Megatron-MoE-ModelZoo, best_practice/Mixtral) runs
    # dropless at 455 TFLOPS per GPU and capacity-padded (every expert at the mean load) at
    # 470: the dropless step is 3.3% longer, and the load-dependent part here (expert GEMMs
    # with their bubble share, the dispatch) is 69% of that step: 1 + 0.033/0.69 = 1.05.
    # docs/costmodel.md says what it is drawn from (the model of a published check).
    expert_load_imbalance: float = 1.05
    # Share of the step's compute that hides the dispatch when the trainer overlaps it
    # (Megatron-LM's --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe): the
    # gradient-reduction share above, for the same reason (the kernels contend for SMs).
    overlap_expert_comm: float = 0.6
    # Multipliers fitted by calibration (1.0 = the analytic model as it is).
    scale_compute: float = 1.0
    scale_bubble: float = 1.0
    scale_model_parallel_comm: float = 1.0  # TP/PP/EP collectives' bandwidth part
    scale_model_parallel_latency: float = 1.0  # their per-step latency part
    scale_data_parallel_comm: float = 1.0

    def with_(self, **changes: float) -> "Coefficients":
        return replace(self, **changes)

    def with_broadcast_overlap(self) -> "Coefficients":
        """Every overlap AMSP's engine has, the broadcast's included (Table V's first column)."""
        return replace(self, overlap_broadcast=self.overlap_grad)

    def without_overlap(self) -> "Coefficients":
        """Every collective on the critical path (AMSP Table V's "no overlap" column)."""
        return replace(self, overlap_grad=0.0, overlap_params=0.0, overlap_broadcast=0.0,
                       overlap_grad_deepspeed=0.0, overlap_params_deepspeed=0.0)
