"""Which layouts torchtitan 0.3.0 runs, each refusal with its reason and source:

- FP8: its Float8 converter (recipe rowwise; Float8LinearConverter.Config has no tensorwise
  recipe, components/quantization/float8.py) and MX converter (precision.py's PRECISIONS);
- offload: `training.enable_cpu_offload` puts FSDP2's weights, gradients and optimizer states on
  the host (FSDP only, all of them or nothing);
- FSDP2 and DDP overlap by themselves, and FSDP2 reduces per unit: no overlap or bucket setting;
- context parallelism: keys and values all-gathered over the cp ranks (allgather only; under its
  spmd_types backend only FlexAttention runs CP, distributed/full_dtensor.py validate_config),
  and seq_len divisible by tp (with sequence parallelism) x 2 x cp (trainer.py);
- mixture of experts: expert parallelism borrows the dp_shard x cp x tp ranks
  (ParallelismConfig.expert_parallel_degree), with no expert tensor parallelism, and an MoE
  campaign names one of its MoE configs (configs.py);
- activation checkpointing wraps every block or none; the first/last pipeline split shortens
  only the first and last model chunks.
"""

from __future__ import annotations

import dataclasses

from orchestrator.trainers.capabilities import (
    bucket_refusal,
    check_comm_types,
    comm_type_refusal,
    first_refusal,
    fp8_refusal,
    has_context_parallelism,
    offload_refusal,
    overlap_refusal,
    problems,
    recomputes_all_or_none,
    space_values,
)
from orchestrator.trainers.torchtitan.configs import (
    TORCHTITAN_MOE_EXAMPLES,
    TORCHTITAN_VARLEN_CONFIGS,
    VARLEN_CP,
    torchtitan_is_moe,
)
from orchestrator.trainers.torchtitan.configs import torchtitan_data_parallel as data_parallel
from orchestrator.trainers.torchtitan.precision import PRECISIONS

NAME = "torchtitan"
FP8_SOURCE = "torchtitan's Float8 converter (recipe rowwise) and MX converter"
OFFLOADS = ("optimizer+params",)
ALWAYS_OVERLAP = "torchtitan's FSDP2 and DDP always overlap their collectives"
NO_BUCKET = "torchtitan has no bucket setting (FSDP2 reduces per unit)"
CP_COMM_TYPES = ("allgather",)
CP_WHY_NOT = ("torchtitan 0.3 all-gathers keys and values over the cp ranks, with no ring "
              "(p2p) or Ulysses (a2a)")


def _moe(model, layout, gpus_per_node: int) -> str | None:
    if layout.etp not in (None, 1):
        return (f"torchtitan: no expert tensor parallelism (etp {layout.etp}): its experts take "
                "tp's ranks as ep or FSDP ranks; set space.etp to [null] or [1]")
    shard = data_parallel(layout, gpus_per_node)[0]
    # A stage's ranks but the replicated data-parallel ones: dp_shard x cp x tp.
    borrowed = dataclasses.replace(layout.dims, dp=shard).stage_ranks
    if borrowed % layout.ep:
        return (f"torchtitan: ep({layout.ep}) must divide dp_shard({shard}) x cp({layout.cp}) x "
                f"tp({layout.tp}) = {borrowed}, the ranks expert parallelism borrows "
                "(replicated data-parallel ranks stay outside); use zero_stage 2 or 3 (FSDP over "
                "dp), or a smaller ep")
    return None


def _context(spec, layout) -> str | None:
    reason = comm_type_refusal(NAME, layout, CP_COMM_TYPES, CP_WHY_NOT)
    if reason:
        return reason
    divisor = layout.dims.seq_divisor  # torchtitan's seq_len_divisor
    seq = spec.model.seq_len
    if seq % divisor:
        return (f"torchtitan: seq_len({seq}) must divide by {divisor}, tp({layout.tp}) x 2 x "
                f"cp({layout.cp}) with sequence parallelism (\"Training sequence length ... must "
                "be divisible by ... for the configured sequence/context parallelism\"); use "
                "sequence_parallel false or a smaller tp or cp")
    return None


def _offload(layout) -> str | None:
    reason = offload_refusal(NAME, layout, OFFLOADS)
    if reason or layout.offload == "none":
        return reason
    if layout.zero_stage != 3:
        return ("torchtitan: offload optimizer+params needs FSDP (training.enable_cpu_offload "
                "offloads FSDP2's shards); use zero_stage 3")
    return None


def _pipeline(layout) -> str | None:
    if (layout.pp > 1 and layout.pipeline_split == "first_last"
            and layout.virtual_stages > 1):
        return ("torchtitan: pipeline_split first_last with virtual_stages > 1: torchtitan "
                "shortens only the first and last model chunks, not every chunk of the first "
                "and last stages; set space.pipeline_split to [embedding_loss] or [even], or "
                "use pp_schedule 1f1b")
    return None


def refusal(spec, layout) -> str | None:
    """Why torchtitan cannot run this layout, or None."""
    return first_refusal(
        lambda: _moe(spec.model, layout, spec.gpus_per_node) if spec.model.is_moe else None,
        lambda: _context(spec, layout) if layout.cp > 1 else None,
        lambda: fp8_refusal(NAME, layout, PRECISIONS, FP8_SOURCE),
        lambda: _offload(layout),
        lambda: overlap_refusal(NAME, layout, ALWAYS_OVERLAP),
        lambda: bucket_refusal(NAME, layout, NO_BUCKET),
        lambda: _pipeline(layout))


def _section(spec) -> tuple[str, str]:
    section = spec.trial.torchtitan
    return (section.module, section.config) if section else ("llama3", "llama3_debugmodel")


def _check_torchtitan(spec) -> None:
    model = spec.model
    module, config = _section(spec)
    if model.is_moe and torchtitan_is_moe(module, config) is False:
        raise ValueError(f"trial.torchtitan.config: torchtitan's {module} {config} is a dense "
                         f"model, and model {model.name!r} has {model.num_experts} experts; "
                         f"name an MoE config of torchtitan's, such as {TORCHTITAN_MOE_EXAMPLES}")
    odd = [v for v in space_values(spec.space, "etp") if v not in (None, 1)]
    if odd:
        raise ValueError(f"space.etp: torchtitan has no expert tensor parallelism (etp "
                         f"{odd[0]}): its experts take tp's ranks as ep or FSDP ranks; "
                         "use [null] or [1]")


def _check_torchtitan_attention(spec) -> None:
    module, config = _section(spec)
    if config in TORCHTITAN_VARLEN_CONFIGS.get(module, ()):
        raise ValueError(f"trial.torchtitan.config: torchtitan's {module} {config} uses "
                         f"variable-length attention, which has no context parallelism "
                         f"({VARLEN_CP}); name a FlexAttention config, or set space.cp to [1]")


def _check_context(spec) -> None:
    if has_context_parallelism(spec):
        check_comm_types(spec, NAME, CP_COMM_TYPES, CP_WHY_NOT)
        _check_torchtitan_attention(spec)


def space_problems(spec) -> list[str]:
    """A model, a config or a range torchtitan cannot run (the default cp_comm_type narrows to
    allgather)."""
    return problems(lambda: recomputes_all_or_none(NAME, spec.space),
                    lambda: (_check_torchtitan(spec), _check_context(spec)))
