"""How the campaign's trainer runs a ZeRO stage: the cost of `zero_stage` depends on the code.

`zero_stage` 1-3 name what is sharded, not how. DeepSpeed (and the Megatron trainers, whose
distributed optimizer is ZeRO-1) gathers weights per module and, at stage 2, reduces
gradients after every micro-batch's backward. The built-in trainer (jobs/) and torchtitan run
PyTorch instead (jobs/layout.py): DDP, ZeroRedundancyOptimizer, and FSDP2 with one unit per
transformer block; ZeRO-2 is FSDP2 with `reshard_after_forward=False`, so weights are sharded
at rest and gathered once per micro-batch (forward), and kept for its backward. The built-in
trainer turns gradient sync off for all but the last micro-batch
(`set_requires_gradient_sync`, DDP's `require_backward_grad_sync`); torchtitan's train loop
does not, so FSDP reduce-scatters, and DDP all-reduces, after every micro-batch.

Stage 0 is DDP, which is no more one thing than the stages are: PyTorch's DDP (the built-in
trainer, torchtitan) and Megatron-LM's reduce float32 gradients, bucket by bucket behind the
backward; DeepSpeed's engine (the DeepSpeed and Megatron-DeepSpeed trainers) reduces the bf16
gradients in its `communication_data_type` (bf16 unless the config says otherwise) once the
backward is over (`DeepSpeedEngine._backward_epilogue` → `allreduce_gradients`, 0.19.8), so
its DDP is priced as a DeepSpeed scheme: bf16 bytes, nothing hidden. Megatron-LM hides its
DDP reduction behind the backward only with `--overlap-grad-reduce` (off by default).

Each trainer declares its own runtime (its adapter's `runtime`, orchestrator/trainers/); a
`command` program's code is not seen: `trial.runtime` names which trainer's engine it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.space import Layout


MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK = 40_000_000, 1_000_000


@dataclass(frozen=True)
class ZeroEngine:
    # Engine that ZeRO stages run on: "deepspeed" or "torch" (space/sharding.py).
    zero_engine: str = "deepspeed"
    # DDP/FSDP gradients reduced once per step (on the last micro-batch), not after every
    # one. DeepSpeed and Megatron reduce DDP and ZeRO-1 gradients at the accumulation
    # boundary too; DeepSpeed's per-micro-batch ZeRO-2/3 reductions are in its own terms.
    grads_once_per_step: bool = True
    # Engine that stage 0 (DDP) runs on: "torch" (PyTorch's or Megatron-LM's DDP) or
    # "deepspeed" (DeepSpeed's engine without ZeRO).
    ddp_engine: str = "torch"
    # Whether a "torch" DDP reduction hides behind the backward (coefficients.py's overlap).
    ddp_overlaps: bool = True
    # Whether the MoE dispatch all-to-alls overlap compute (moe_time.py): Megatron-LM's
    # batch-level overlap, off by default; none of the other trainers does it.
    overlaps_expert_comm: bool = False
    # Whether the MoE dispatch sends a token once per node it reaches and forwards it over
    # NVLink (DeepEP: Megatron-LM's flex dispatcher), rather than once per (token, expert).
    dispatch_per_node: bool = False
    # Whether weights shard over the context-parallel ranks at every stage (torchtitan's FSDP
    # over dp_shard x cp: at ZeRO 0 and 1 an HSDP over cp; context_parallel.gradient_group).
    shards_over_cp: bool = False
    # What "selective" recompute replays in this trainer: "selective" (Megatron-Core's core
    # attention) or one of PER_OP_KINDS (torchtitan's SelectiveAC: every second matmul and the
    # element-wise ops, keeping the other matmuls' outputs; orchestrator/result.py).
    selective_recompute: str = "selective"
    # Whether ZeRO-1 is Megatron-Core's distributed optimizer: its DDP reduce-scatters the
    # gradients into the optimizer's shards (param_and_grad_buffer.py, `start_grad_sync`),
    # bucket by bucket behind the backward with --overlap-grad-reduce as its DDP's all-reduce
    # is; DeepSpeed's stage 1 all-reduces them after the backward.
    zero1_reduce_scatters: bool = False
    # Whether an interleaved pipeline starts each model chunk's gradient reduction once that
    # chunk's last micro-batch's backward is done (Megatron-Core's interleaved schedule,
    # schedules.py `is_last_microbatch_for_model_chunk`, with --overlap-grad-reduce), so the
    # reductions of the chunks done first hide behind the backward of the others.
    grad_sync_per_model_chunk: bool = False
    # Whether the distributed optimizer's weight gather after the step hides behind the next
    # forward (Megatron-Core's overlap_param_gather: each bucket's all-gather dispatched ahead
    # of the forward that needs it, per model chunk when interleaved).
    param_gather_overlaps: bool = False
    # Whether gradient buckets hold max(40M, 1M x data-parallel size) parameters, Megatron-
    # Core's default `bucket_size` (distributed_data_parallel.py), so a reduction over many
    # ranks runs in fewer, larger calls; else the coefficients' `bucket_bytes` (PyTorch's).
    buckets_grow_with_dp: bool = False
    # Whether DDP reduces the gradients in the weights' 16-bit dtype, all of them in one
    # coalesced all-reduce after the backward, rather than float32 gradients in buckets:
    # Megatron-LM's "local" DDP of 2020-2021 (the default `--DDP-impl local`; at 8aa4619,
    # megatron/model/distributed.py `allreduce_params` flattens every gradient of a dtype
    # into one tensor, in fp16 under --fp16 unless --fp32-allreduce).
    ddp_one_16bit_call: bool = False

    def gradient_bucket_bytes(self, default: float, dp_ranks: int, bytes_per_grad: int) -> float:
        """The bytes of one gradient bucket reduced over `dp_ranks`."""
        if not self.buckets_grow_with_dp:
            return default
        return bytes_per_grad * max(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK
                                    * dp_ranks)

    def engine_of(self, zero_stage: int) -> str:
        """The engine that runs `zero_stage` in this trainer."""
        return self.ddp_engine if zero_stage == 0 else self.zero_engine

    def recompute_of(self, layout: Layout) -> str:
        """The recompute this trainer runs for the layout's `activation_checkpointing`."""
        mode = layout.activation_checkpointing
        return self.selective_recompute if mode == "selective" else mode


# Megatron-Core's DDP, in the Megatron-LM and Megatron-Bridge trainers and the published
# Megatron/NeMo runs: its distributed optimizer reduce-scatters, and its interleaved schedule
# reduces each model chunk's gradients once the chunk's backward is done.
MEGATRON_CORE_GRADIENTS = {"zero1_reduce_scatters": True, "grad_sync_per_model_chunk": True,
                           "buckets_grow_with_dp": True}

# What a trainer whose code the model does not see is priced as (a `command` program without
# `trial.runtime`): ZeRO stages as DeepSpeed runs them, stage 0 as PyTorch's DDP.
DEEPSPEED = ZeroEngine()
# PyTorch's DDP, ZeroRedundancyOptimizer and FSDP2 with gradient sync on the last micro-batch
# only: the built-in trainer's (jobs/layout.py), whose steps the profile times.
PYTORCH = ZeroEngine(zero_engine="torch")
