"""Precision, offload, overlap and bucket values a trainer cannot run, refused before any trial
with the tool's own reason, in one line that names the field and the fix. Applied beside the
mixture-of-experts and context-parallel rules (trainer_layouts.py `layout_refusal`).

What each trainer has, read in the releases ParaTune renders for:

- builtin (jobs/): FP8 through torchao's Float8Linear recipes "tensorwise" and "rowwise" on CUDA
  devices of compute capability 8.9+ (a CPU cluster has no FP8 peak, so the cost model records an
  FP8 layout there `infeasible`); optimizer offload (states and their step on the host) and, with
  FSDP, FSDP2's CPUOffloadPolicy for weights too; PyTorch's DDP and FSDP2 always overlap their
  collectives, and DDP's bucket is `bucket_cap_mb` (FSDP2 reduces per unit, with no bucket).
- Megatron-LM (megatron-core 0.19.2): `--fp8-recipe` tensorwise, delayed, blockwise, mxfp8;
  `--optimizer-cpu-offload` offloads the distributed optimizer's states (ZeRO-1 and up), never the
  weights; `--overlap-grad-reduce`, `--overlap-param-gather`, `--ddp-bucket-size`, the
  bucket used only while it overlaps (megatron/training/training.py, resolve_ddp_bucket_size:
  "if ``overlap_grad_reduce`` is False: ``None`` (overrides the above)"), so a bucket size with
  overlap_comm false is refused.
- torchtitan 0.3.0: Float8 (rowwise) and MX (mxfp8) converters from its config registry.
  Its Float8 converter has no tensorwise recipe (components/quantization/float8.py,
  Float8LinearConverter.Config: `recipe_name: Literal["rowwise", "rowwise_with_gw_hp"] =
  "rowwise"`), so fp8-tensorwise is refused there. `training.enable_cpu_offload` puts FSDP2's
  weights, gradients and optimizer states on the host (FSDP only, all of them or nothing);
  FSDP2 and DDP overlap by themselves.
- DeepSpeed 0.19.8 and Megatron-DeepSpeed: ZeRO's offload_optimizer (stages 1-3) and
  offload_param (stage 3), overlap_comm, reduce_bucket_size and allgather_bucket_size; no FP8
  in the engine (Transformer Engine's FP8 lives in a model's own code).
- command: the user's program takes {precision}, {offload}, {overlap_comm}, {bucket_size}.
"""

from __future__ import annotations

FP8_RECIPES: dict[str, tuple[str, ...]] = {
    "builtin": ("fp8-tensorwise", "fp8-rowwise"),
    "megatron-lm": ("fp8-tensorwise", "fp8-delayed", "fp8-blockwise", "mxfp8"),
    "torchtitan": ("fp8-rowwise", "mxfp8"),
    "deepspeed": (),
    "megatron-deepspeed": (),
}
FP8_SOURCE = {
    "builtin": "torchao's Float8Linear recipes",
    "megatron-lm": "megatron-core's --fp8-recipe",
    "torchtitan": "torchtitan's Float8 converter (recipe rowwise) and MX converter",
    "deepspeed": "DeepSpeed's engine has no FP8 GEMMs (Transformer Engine's FP8 lives in the "
                 "model's code: use trainer command with {precision})",
    "megatron-deepspeed": "Megatron-DeepSpeed trains in bf16 or fp16 only",
}
# Offload values each trainer runs ("none" everywhere).
OFFLOADS: dict[str, tuple[str, ...]] = {
    "builtin": ("optimizer", "optimizer+params"),
    "megatron-lm": ("optimizer",),
    "torchtitan": ("optimizer+params",),
    "deepspeed": ("optimizer", "optimizer+params"),
    "megatron-deepspeed": ("optimizer", "optimizer+params"),
}
# Trainers whose collectives always overlap and whose own setting ParaTune cannot switch.
ALWAYS_OVERLAP = {"builtin": "PyTorch's DDP and FSDP2 always overlap their collectives",
                  "torchtitan": "torchtitan's FSDP2 and DDP always overlap their collectives"}
NO_BUCKET = {"torchtitan": "torchtitan has no bucket setting (FSDP2 reduces per unit)"}


def _precision(trainer: str, config) -> str | None:
    runs = FP8_RECIPES.get(trainer)
    if config.precision == "bf16" or runs is None or config.precision in runs:
        return None
    fix = f"one of {', '.join(runs)}" if runs else "bf16"
    return (f"{trainer}: precision {config.precision}: {FP8_SOURCE[trainer]}; set "
            f"space.precision to {fix}")


def _offload(trainer: str, config) -> str | None:
    runs = OFFLOADS.get(trainer)
    offload = config.offload
    if offload == "none" or runs is None:
        return None
    if offload not in runs:
        return (f"{trainer}: offload {offload}: it offloads {' or '.join(runs)} only; set "
                f"space.offload to none or {runs[0]}")
    # One data-parallel rank shards nothing, so stage 0 is every stage there (the DeepSpeed
    # config names stage 1, which offloads).
    sharded = config.sharding is not None or config.zero_stage > 0 or config.dp == 1
    if trainer in ("megatron-lm", "deepspeed", "megatron-deepspeed") and not sharded:
        what = ("--optimizer-cpu-offload offloads the distributed optimizer's states"
                if trainer == "megatron-lm" else "ZeRO-Offload runs on ZeRO stages 1-3")
        return f"{trainer}: offload {offload} with zero_stage 0: {what}; use zero_stage 1 or more"
    if trainer == "torchtitan" and config.zero_stage != 3:
        return ("torchtitan: offload optimizer+params needs FSDP (training.enable_cpu_offload "
                "offloads FSDP2's shards); use zero_stage 3")
    return None


def _overlap_and_bucket(trainer: str, config) -> str | None:
    if config.overlap_comm is not None and trainer in ALWAYS_OVERLAP:
        return (f"{trainer}: overlap_comm {str(config.overlap_comm).lower()}: "
                f"{ALWAYS_OVERLAP[trainer]}; set space.overlap_comm to [null]")
    if config.bucket_size is not None and trainer in NO_BUCKET:
        return f"{trainer}: bucket_size: {NO_BUCKET[trainer]}; set space.bucket_size to [null]"
    if trainer == "megatron-lm" and config.bucket_size is not None and config.overlap_comm is False:
        return ("megatron-lm: bucket_size with overlap_comm false: Megatron reduces in one bucket "
                "without --overlap-grad-reduce; set space.overlap_comm to [true] or "
                "space.bucket_size to [null]")
    if (trainer in ("deepspeed", "megatron-deepspeed") and config.bucket_size is not None
            and config.bucket_size % 2):
        return (f"{trainer}: bucket_size {config.bucket_size}: DeepSpeed asserts "
                "\"allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2\"; "
                "use an even size")
    return None


def precision_refusal(trainer: str | None, config) -> str | None:
    """Why `trainer` cannot run this layout's precision, offload, overlap or bucket, or None."""
    trainer = trainer or "builtin"
    return (_precision(trainer, config) or _offload(trainer, config)
            or _overlap_and_bucket(trainer, config))
