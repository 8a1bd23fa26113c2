"""Which layout knob values Megatron-Bridge runs through this adapter, each limit with its reason
and the source it was read in (megatron-bridge 0.6.2, megatron-core 0.19.2), and the one check
(`refusal`) the adapter applies before it renders a layout.

Megatron-Bridge trains Megatron-Core models, so the layouts Megatron-Core itself refuses (the
mixture-of-experts, context-parallel, precision, offload and pipeline-split rules written for
megatron-lm in campaign_spec/trainer_layouts.py) are refused here by the same rules, named for
Megatron-Core.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.campaign_spec.trainer_layouts import layout_refusal
from orchestrator.trainers.megatron_bridge.overrides import MIXED_PRECISION

NAME = "megatron-bridge"
TOOL = "megatron-bridge 0.6.2 (scripts/training/run_recipe.py of v0.6.0, megatron-core 0.19.2)"
SAME_RULES_AS = "megatron-lm"  # the Megatron-Core rules Bridge shares


@dataclass(frozen=True)
class Capability:
    """The values of one knob this trainer runs; any other is refused with `reason`."""

    knob: str
    values: tuple
    reason: str
    source: str


CAPABILITIES = (
    Capability("zero_stage", (0, 1),
               "ZeRO-1 is Megatron-Core's distributed optimizer (optimizer/ddp "
               ".use_distributed_optimizer); stages 2 and 3 would be Megatron-FSDP, which this "
               "adapter does not render",
               "megatron/bridge/training/config.py _validate_and_sync_distributed_optimizer_settings"),
    Capability("pp_schedule", ("1f1b", "interleaved"),
               "Megatron-Core's pipeline runs 1F1B, interleaved with "
               "virtual_pipeline_model_parallel_size; it has no GPipe schedule",
               "megatron/core/pipeline_parallel/schedules.py get_forward_backward_func"),
    Capability("precision", tuple(MIXED_PRECISION),
               "the FP8 recipes are Bridge's registered mixed-precision recipes; none is "
               "row-wise",
               "megatron/bridge/training/mixed_precision.py MIXED_PRECISION_RECIPES"),
    Capability("offload", ("none", "optimizer"),
               "Megatron-Core offloads optimizer states only (optimizer_cpu_offload)",
               "megatron/core/optimizer/optimizer_config.py OptimizerConfig"),
    Capability("compile", (False,),
               "Bridge's recipes do not torch.compile the model through a layout field",
               "megatron/bridge/training/config.py ConfigContainer"),
    Capability("device", ("any accelerator",),
               "Bridge's training_log keeps its loss sums on device='cuda': a CPU cluster "
               "cannot run it",
               "megatron/bridge/training/utils/train_utils.py training_log"),
)
BY_KNOB = {c.knob: c for c in CAPABILITIES}


def supported(knob: str) -> tuple | None:
    """The values of `knob` this trainer runs; None where it runs every value."""
    capability = BY_KNOB.get(knob)
    return capability.values if capability else None


def _knob_refusal(spec, layout) -> str | None:
    values = {**layout.knob_values(), "device": spec.cluster.device}
    for capability in CAPABILITIES:
        given = values.get(capability.knob)
        if capability.knob == "device":
            if given == "cpu":
                return (f"{NAME}: cluster.device cpu: {capability.reason} "
                        f"({capability.source}); use a GPU cluster")
            continue
        if capability.knob == "pp_schedule" and layout.pp == 1:
            continue  # one stage has no schedule to speak of
        if given not in capability.values:
            return (f"{NAME}: {capability.knob} {given}: {capability.reason} "
                    f"({capability.source}); use {list(capability.values)}")
    return None


def refusal(spec, layout) -> str | None:
    """Why Megatron-Bridge cannot run this layout of the spec's model, or None."""
    if layout.sharding is not None:
        return (f"{NAME}: AMSP sharding factors have no Megatron-Core field; use space.kind "
                "megatron-3d")
    reason = _knob_refusal(spec, layout)
    if reason:
        return reason
    shared = layout_refusal(SAME_RULES_AS, spec, layout)
    if shared:
        return f"{NAME} runs Megatron-Core, which refuses it as {shared}"
    return None


def space_refusals(spec) -> list[str]:
    """A value the spec's ranges list that Bridge never runs, one line each with its reason;
    a CPU cluster, which it cannot run on at all."""
    lines = []
    for capability in CAPABILITIES:
        if capability.knob == "device":
            if spec.cluster.device == "cpu":
                lines.append(f"cluster.device: cpu: {NAME}: {capability.reason} "
                             f"({capability.source}); use a GPU cluster")
            continue
        listed = getattr(spec.space, capability.knob, None) or []
        outside = [v for v in dict.fromkeys(listed) if v not in capability.values]
        if outside and spec.space.kind != "list":
            lines.append(f"space.{capability.knob}: {NAME} does not run "
                         f"{', '.join(map(str, outside))}: {capability.reason} "
                         f"({capability.source}); use {list(capability.values)}")
    return lines
