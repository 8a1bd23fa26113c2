"""Which layouts Megatron-LM (megatron-core 0.19.2) and Megatron-DeepSpeed (f1feb887, on DeepSpeed
0.19.8) run, each refusal with its reason and source:

- ZeRO: Megatron-LM's distributed optimizer is ZeRO-1 (no stage 2 or 3; the default stages
  narrow to 0 and 1); neither tool takes AMSP factors or runs GPipe, and Megatron-DeepSpeed has
  no interleaved schedule and recomputes every layer or none;
- FP8: Megatron-LM's `--fp8-recipe` values (precision.py's FP8_FLAGS); Megatron-DeepSpeed trains
  in bf16 or fp16 only;
- offload: `--optimizer-cpu-offload` offloads the distributed optimizer's states (ZeRO-1 and
  up), never the weights; Megatron-DeepSpeed has ZeRO-Offload (deepspeed/capabilities.py);
- bucket: Megatron-LM uses `--ddp-bucket-size` only while it overlaps (training.py,
  resolve_ddp_bucket_size: "if overlap_grad_reduce is False: None"); DeepSpeed's must be even;
- context parallelism: Megatron-LM runs p2p, a2a and allgather in TransformerEngine's attention
  only (local DotProductAttention asserts "Context parallelism is only supported by
  TEDotProductAttention!"; TE's unfused backend "does not support context parallelism"; a2a
  splits a tp rank's heads over cp); Megatron-DeepSpeed runs DeepSpeed-Ulysses, refused beside
  Megatron's own sequence parallelism;
- mixture of experts: Megatron-Core warns "When using expert parallelism and tensor parallelism
  for training, sequence parallelism must be used" and asserts "Bias in Moe is only supported
  when ETP==1"; Megatron-DeepSpeed builds DeepSpeed's MoE layer (experts copies of its MLP on
  layers N, 2N, ..., no shared experts, expert groups inside the data-parallel group, experts
  over the whole tp group or none, no ZeRO stage 3);
- pipeline split: Megatron-LM's --account-for-embedding/loss-in-pipeline-split and
  --decoder-first/last-pipeline-num-layers; Megatron-DeepSpeed's pipeline partitions its own way.
"""

from __future__ import annotations

from orchestrator.layout import expert_tp
from orchestrator.trainers.capabilities import (
    check_comm_types,
    comm_type_refusal,
    first_refusal,
    fp8_refusal,
    offload_refusal,
    problems,
    recomputes_all_or_none,
    space_values,
    uneven_split_refusal,
    unsharded,
)
from orchestrator.trainers.deepspeed.capabilities import (
    CP_COMM_TYPES as ULYSSES,
    even_bucket_refusal,
    ulysses_heads_refusal,
    zero_offload_refusal,
)
from orchestrator.trainers.megatron.precision import FP8_FLAGS
from orchestrator.trainers.megatron.flags import DS, LM

LM_FP8_SOURCE = "megatron-core's --fp8-recipe"
DS_FP8_SOURCE = "Megatron-DeepSpeed trains in bf16 or fp16 only"
LM_OFFLOADS = ("optimizer",)
NO_OVERLAP_BUCKET = ("with overlap_comm false: Megatron reduces in one bucket without "
                     "--overlap-grad-reduce; set space.overlap_comm to [true] or "
                     "space.bucket_size to [null]")
DS_CP_WHY_NOT = ("its context parallelism is DeepSpeed-Ulysses (--ds-sequence-parallel-size), "
                 "an all-to-all over heads")


def _megatron_deepspeed_model(model) -> str | None:
    """What of an MoE model Megatron-DeepSpeed's MoE layer cannot build, as `key: reason`."""
    fix = "or use trainer megatron-lm"
    if model.moe_router_num_groups:
        return (f"model.moe_router_num_groups: megatron-deepspeed routes to any expert (no "
                f"group-limited routing); remove it, {fix}")
    if model.shared_expert_ffn_hidden:
        return ("model.shared_expert_ffn_hidden: megatron-deepspeed has no shared experts (its "
                f"--mlp-type residual is another layer); set 0, {fix}")
    if model.first_dense_layers or model.moe_layer_freq > 1:
        key = "first_dense_layers" if model.first_dense_layers else "moe_layer_freq"
        return (f"model.{key}: megatron-deepspeed puts experts on layers N, 2N, ... counted "
                "from 1 (--expert-interval), not ParaTune's layers; use first_dense_layers 0 "
                f"and moe_layer_freq 1, {fix}")
    return None


ZERO3_MOE = ("DeepSpeed's native MoE layer refuses ZeRO stage 3 (\"Native DeepSpeed MoE is not "
             "supported with ZeRO Stage 3\"); use stages 0 to 2")


def _check_megatron_deepspeed(spec) -> None:
    model, space = spec.model, spec.space
    if not model.is_moe:
        return
    problem = _megatron_deepspeed_model(model)
    if problem:
        raise ValueError(problem)
    if "zero_stage" not in space.model_fields_set and space.kind != "list":
        space.zero_stage = [s for s in space.zero_stage if s < 3] or [0]
    if 3 in space_values(space, "zero_stage"):
        raise ValueError(f"space.zero_stage: {ZERO3_MOE}")


def _lm_moe(model, layout) -> str | None:
    if layout.ep > 1 and layout.tp > 1 and not layout.sequence_parallel:
        return (f"megatron-lm: ep({layout.ep}) with tp({layout.tp}) needs sequence_parallel "
                "(Megatron-Core: \"When using expert parallelism and tensor parallelism for "
                "training, sequence parallelism must be used\"); add true to "
                "space.sequence_parallel")
    etp = expert_tp(layout.knob_values())
    if not model.gated_mlp and etp > 1:
        return (f"megatron-lm: a GPT model's experts have biases, which Megatron-Core splits "
                f"over no etp({etp}) (\"Bias in Moe is only supported when ETP==1\"); set "
                "space.etp to [1]")
    return None


def _ds_moe(model, layout) -> str | None:
    problem = _megatron_deepspeed_model(model)
    if problem:
        return f"megatron-deepspeed: {problem}"
    if layout.sharding is None and layout.zero_stage == 3:
        return f"megatron-deepspeed: zero_stage 3: {ZERO3_MOE}"
    if layout.dp % layout.ep:
        return (f"megatron-deepspeed: ep({layout.ep}) must divide dp({layout.dp}), as DeepSpeed "
                "makes its expert groups inside the data-parallel group; use an ep that "
                "divides dp, or trainer megatron-lm")
    if layout.etp not in (None, 1, layout.tp):
        return (f"megatron-deepspeed: etp({layout.etp}) must be 1 or tp({layout.tp}) "
                "(--enable-expert-tensor-parallelism splits experts over the whole tp group or "
                "not at all); set space.etp to [null] or [1]")
    return None


def _lm_context(spec, layout) -> str | None:
    cp = layout.cp
    if spec.cluster.device == "cpu":
        return (f"megatron-lm: cp({cp}) runs only in TransformerEngine's attention, which needs "
                "CUDA (Megatron-Core's local attention: \"Context parallelism is only supported "
                "by TEDotProductAttention!\"); use trainer builtin on CPUs, or space.cp [1]")
    if not spec.trial.flash_attention:
        return (f"megatron-lm: cp({cp}) with trial.flash_attention false renders "
                "--attention-backend=unfused, and TransformerEngine's unfused attention has no "
                "context parallelism (\"Disabling UnfusedDotProductAttention as it does not "
                "support context parallelism\"); set trial.flash_attention to true")
    kv = spec.model.kv_heads // layout.tp
    if layout.cp_comm_type == "a2a" and (kv == 0 or kv % cp):
        return (f"megatron-lm: cp({cp}) with cp_comm_type a2a splits the {kv} key/value heads "
                "of a tp rank over cp (TransformerEngine: \"The number of attention heads needs "
                "to be divisible by CP size!\"); use p2p or allgather")
    return None


def _lm_offload(layout) -> str | None:
    reason = offload_refusal(LM, layout, LM_OFFLOADS)
    if reason or layout.offload == "none" or not unsharded(layout):
        return reason
    return (f"{LM}: offload {layout.offload} with zero_stage 0: --optimizer-cpu-offload "
            "offloads the distributed optimizer's states; use zero_stage 1 or more")


def _lm_bucket(layout) -> str | None:
    if layout.bucket_size is not None and layout.overlap_comm is False:
        return f"{LM}: bucket_size {NO_OVERLAP_BUCKET}"
    return None


def lm_refusal(spec, layout) -> str | None:
    """Why Megatron-LM cannot run this layout, or None."""
    return first_refusal(
        lambda: _lm_moe(spec.model, layout) if spec.model.is_moe else None,
        lambda: _lm_context(spec, layout) if layout.cp > 1 else None,
        lambda: fp8_refusal(LM, layout, tuple(FP8_FLAGS), LM_FP8_SOURCE),
        lambda: _lm_offload(layout),
        lambda: _lm_bucket(layout))


def _ds_sequence_parallel(layout) -> str | None:
    if layout.sequence_parallel:
        return ("megatron-deepspeed: sequence_parallel with cp > 1: \"sequence_parallel_size > 1 "
                "enables DeepSpeed's sequence parallel, which is not compatible with "
                "Megatron-LM's sequence parallel\"; set space.sequence_parallel to [false]")
    return None


def ds_refusal(spec, layout) -> str | None:
    """Why Megatron-DeepSpeed cannot run this layout, or None."""
    context = layout.cp > 1
    return first_refusal(
        lambda: _ds_moe(spec.model, layout) if spec.model.is_moe else None,
        lambda: comm_type_refusal(DS, layout, ULYSSES, DS_CP_WHY_NOT) if context else None,
        lambda: _ds_sequence_parallel(layout) if context else None,
        lambda: ulysses_heads_refusal(DS, spec, layout) if context else None,
        lambda: fp8_refusal(DS, layout, (), DS_FP8_SOURCE),
        lambda: zero_offload_refusal(DS, layout),
        lambda: even_bucket_refusal(DS, layout),
        lambda: uneven_split_refusal(DS, layout))


def _check_megatron_space(trainer: str, space) -> None:
    """Layouts the Megatron trainers cannot express, refused before any trial: ZeRO 2 and 3 on
    Megatron-LM (its distributed optimizer is ZeRO-1; the default stages narrow to 0 and 1),
    AMSP factors, GPipe, and interleaving on Megatron-DeepSpeed."""
    if trainer == LM and "zero_stage" not in space.model_fields_set:
        space.zero_stage = [0, 1]
    if space.kind == "amsp":
        raise ValueError(f"space.kind: {trainer} takes ZeRO stages, not AMSP's sharding factors; "
                         "use megatron-3d")
    listed = [c.fields() for c in space.configs]
    stages = [c.get("zero_stage", 0) for c in listed] if listed else space.zero_stage
    schedules = [c.get("pp_schedule", "1f1b") for c in listed] if listed else space.pp_schedule
    virtual = [c.get("virtual_stages", 1) for c in listed] if listed else space.virtual_stages
    if trainer == LM and max(stages) > 1:
        raise ValueError(f"space.zero_stage: megatron-lm has no ZeRO stage {max(stages)} (its "
                         "distributed optimizer is ZeRO-1); use [0, 1], or trainer "
                         "megatron-deepspeed for stages 2 and 3")
    if "gpipe" in schedules:
        raise ValueError(f"space.pp_schedule: {trainer} has no GPipe schedule; use 1f1b "
                         "(or interleaved on megatron-lm)")
    if trainer == DS and max(virtual) > 1:
        raise ValueError("space.virtual_stages: megatron-deepspeed's pipeline has no "
                         "interleaved schedule; use [1]")


def lm_space_problems(spec) -> list[str]:
    """A range Megatron-LM cannot express (the default zero_stage narrows to [0, 1])."""
    return problems(lambda: _check_megatron_space(LM, spec.space))


def ds_space_problems(spec) -> list[str]:
    """A range or an MoE model Megatron-DeepSpeed cannot run (the default cp_comm_type narrows
    to a2a, and an MoE campaign's default zero_stage leaves out 3)."""
    return problems(lambda: _check_megatron_space(DS, spec.space),
                    lambda: recomputes_all_or_none(DS, spec.space),
                    lambda: (_check_megatron_deepspeed(spec),
                             check_comm_types(spec, DS, ULYSSES, DS_CP_WHY_NOT)))
