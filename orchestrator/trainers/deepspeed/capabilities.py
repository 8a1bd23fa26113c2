"""Which layouts DeepSpeed 0.19.8 runs, each refusal with its reason and source, for the DeepSpeed
trainer and for Megatron-DeepSpeed, which runs DeepSpeed's engine (megatron/capabilities.py):

- ZeRO's offload_optimizer (stages 1-3) and offload_param (stage 3); no FP8 in the engine
  (Transformer Engine's FP8 lives in a model's own code);
- overlap_comm, reduce_bucket_size and allgather_bucket_size, the bucket even (DeepSpeed asserts
  "allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2");
- sequence parallelism is Ulysses only (a2a: deepspeed.sequence.layer.DistributedAttention),
  which asserts "Number of key-value heads (n) must be at least the sequence parallel size";
  Megatron-DeepSpeed refuses it beside Megatron's own sequence parallelism
  (megatron/initialize.py);
- its pipeline (PipelineModule's partition_method) partitions the layers its own way;
- a DeepSpeed script sees ep, etp and cp only through its own {placeholders}.
"""

from __future__ import annotations

from orchestrator.trainers.capabilities import (
    check_comm_types,
    comm_type_refusal,
    first_refusal,
    fp8_refusal,
    offload_refusal,
    problems,
    space_values,
    uneven_split_refusal,
    unsharded,
)

NAME = "deepspeed"
FP8_SOURCE = ("DeepSpeed's engine has no FP8 GEMMs (Transformer Engine's FP8 lives in the "
              "model's code: use trainer command with {precision})")
OFFLOADS = ("optimizer", "optimizer+params")
CP_COMM_TYPES = ("a2a",)
CP_WHY_NOT = ("DeepSpeed's sequence parallelism is Ulysses (deepspeed.sequence.layer."
              "DistributedAttention), an all-to-all over heads")
KV_HEADS_ULYSSES = "\"Number of key-value heads ... must be at least the sequence parallel size\""


def ulysses_heads_refusal(trainer: str, spec, layout) -> str | None:
    """DeepSpeed's Ulysses, under Megatron-DeepSpeed or a DeepSpeed script, splits the
    key/value heads of a tp rank over cp."""
    kv = spec.model.kv_heads // layout.tp
    if kv < layout.cp:
        return (f"{trainer}: cp({layout.cp}) exceeds the {kv} key/value heads of a tp rank "
                f"(DeepSpeed's Ulysses: {KV_HEADS_ULYSSES}); use a smaller cp or tp")
    return None


def zero_offload_refusal(trainer: str, layout) -> str | None:
    """ZeRO-Offload's values, on ZeRO stages 1-3 only."""
    reason = offload_refusal(trainer, layout, OFFLOADS)
    if reason or layout.offload == "none" or not unsharded(layout):
        return reason
    return (f"{trainer}: offload {layout.offload} with zero_stage 0: ZeRO-Offload runs on ZeRO "
            "stages 1-3; use zero_stage 1 or more")


def even_bucket_refusal(trainer: str, layout) -> str | None:
    if layout.bucket_size is not None and layout.bucket_size % 2:
        return (f"{trainer}: bucket_size {layout.bucket_size}: DeepSpeed asserts "
                "\"allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2\"; "
                "use an even size")
    return None


def refusal(spec, layout) -> str | None:
    """Why a DeepSpeed script cannot run this layout, or None."""
    return first_refusal(
        lambda: comm_type_refusal(NAME, layout, CP_COMM_TYPES, CP_WHY_NOT) if layout.cp > 1
        else None,
        lambda: ulysses_heads_refusal(NAME, spec, layout) if layout.cp > 1 else None,
        lambda: fp8_refusal(NAME, layout, (), FP8_SOURCE),
        lambda: zero_offload_refusal(NAME, layout),
        lambda: even_bucket_refusal(NAME, layout),
        lambda: uneven_split_refusal(NAME, layout))


def _check_placeholders(spec) -> None:
    """A DeepSpeed script sees ep, etp and cp only through its own {placeholders} (they build
    its MoE and Ulysses layers): a range of them that no argument carries would run one program
    under several names (`space.kind: list` names each layout itself, as for a command)."""
    if spec.space.kind == "list":
        return
    args = " ".join(spec.trial.deepspeed.args) if spec.trial.deepspeed else ""
    for name in ("ep", "etp", "cp"):
        values = list(dict.fromkeys(space_values(spec.space, name)))
        if len(values) > 1 and "{" + name + "}" not in args:
            raise ValueError(f"space.{name}: trial.deepspeed.args hold no {{{name}}}, so its "
                             f"values {', '.join(map(str, values))} would run the same "
                             f"program; pass {{{name}}} to the script, or search one value")


def space_problems(spec) -> list[str]:
    """A range a DeepSpeed script would not see, or a transport it cannot run (the default
    cp_comm_type narrows to a2a)."""
    return problems(lambda: (_check_placeholders(spec),
                             check_comm_types(spec, NAME, CP_COMM_TYPES, CP_WHY_NOT)))
