"""The shapes of a trainer's refusals, shared by the trainers' capabilities.py: a knob value it
does not run, named with its reason and source in one line that names the field and the fix.

Each trainer's folder declares its values (its FP8 recipes, offloads, CP transports, ...) and
composes these into its adapter's `layout_refusal` (one layout) and `check_spec` (a range or a
model the spec asks for), so the spec asks the trainer and holds no trainer's facts.
"""

from __future__ import annotations

from typing import Any, Callable


def space_values(space, name: str) -> list[Any]:
    """A knob's values in the space: its range, or every listed layout's (None where unset)."""
    if space.kind == "list":
        return [getattr(entry, name) for entry in space.configs]
    return list(getattr(space, name))


def first_refusal(*rules: Callable[[], str | None]) -> str | None:
    """The first reason one of `rules` gives, in order."""
    for rule in rules:
        reason = rule()
        if reason:
            return reason
    return None


def problems(*checks: Callable[[], None]) -> list[str]:
    """Each check's refusal (its ValueError's line), so one run names every problem."""
    lines = []
    for check in checks:
        try:
            check()
        except ValueError as exc:
            lines.append(str(exc))
    return lines


def fp8_refusal(trainer: str, layout, runs: tuple[str, ...], source: str) -> str | None:
    """An FP8 precision outside the recipes `runs` (source: where they are listed)."""
    if layout.precision == "bf16" or layout.precision in runs:
        return None
    fix = f"one of {', '.join(runs)}" if runs else "bf16"
    return f"{trainer}: precision {layout.precision}: {source}; set space.precision to {fix}"


def offload_refusal(trainer: str, layout, runs: tuple[str, ...]) -> str | None:
    """An offload value the trainer does not run ("none" it always runs)."""
    if layout.offload == "none" or layout.offload in runs:
        return None
    return (f"{trainer}: offload {layout.offload}: it offloads {' or '.join(runs)} only; set "
            f"space.offload to none or {runs[0]}")


def unsharded(layout) -> bool:
    """Whether the layout shards nothing (stage 0 over several data-parallel ranks): one rank
    shards nothing either way, so stage 0 is every stage there."""
    return layout.sharding is None and layout.zero_stage == 0 and layout.dp > 1


def overlap_refusal(trainer: str, layout, always: str) -> str | None:
    """An overlap_comm value where the trainer always overlaps (`always`: why)."""
    if layout.overlap_comm is None:
        return None
    return (f"{trainer}: overlap_comm {str(layout.overlap_comm).lower()}: {always}; set "
            "space.overlap_comm to [null]")


def bucket_refusal(trainer: str, layout, why: str | None) -> str | None:
    """A bucket_size where the trainer has no bucket for this layout (`why`; None: it has)."""
    if layout.bucket_size is None or why is None:
        return None
    return f"{trainer}: bucket_size: {why}; set space.bucket_size to [null]"


def comm_type_refusal(trainer: str, layout, runs: tuple[str, ...], why_not: str) -> str | None:
    """A context-parallel transport the trainer does not run."""
    if layout.cp_comm_type in runs:
        return None
    return (f"{trainer}: cp_comm_type {layout.cp_comm_type}: {why_not}; set "
            f"space.cp_comm_type to [{', '.join(runs)}]")


def has_context_parallelism(spec) -> bool:
    return any((cp or 1) > 1 for cp in space_values(spec.space, "cp"))


def check_comm_types(spec, trainer: str, runs: tuple[str, ...], why_not: str) -> None:
    """A range of comm types the trainer runs: its own by default, and a value it cannot run
    is the range's error (checked only where some layout has cp > 1)."""
    space = spec.space
    if space.kind == "list" or not has_context_parallelism(spec):
        return
    if "cp_comm_type" not in space.model_fields_set:
        space.cp_comm_type = list(runs)
        return
    odd = [t for t in space.cp_comm_type if t not in runs]
    if odd:
        raise ValueError(f"space.cp_comm_type: {trainer} cannot run {odd[0]} ({why_not}); "
                         f"use [{', '.join(runs)}]")


def uneven_split_refusal(trainer: str, layout) -> str | None:
    """A pipeline split a trainer whose pipeline partitions the layers its own way cannot run."""
    if layout.pp == 1 or layout.pipeline_split == "even":
        return None
    return (f"{trainer}: pipeline_split {layout.pipeline_split}: its pipeline partitions the "
            "layers its own way; set space.pipeline_split to [even], or use trainer builtin, "
            "megatron-lm or torchtitan")


def recomputes_all_or_none(trainer: str, space) -> None:
    """A trainer that recomputes every layer or none refuses `recompute_num_layers`."""
    listed = [c.recompute_num_layers for c in space.configs]
    if any(v is not None for v in listed + space.recompute_num_layers):
        raise ValueError(f"space.recompute_num_layers: {trainer} recomputes every layer or none; "
                         "remove it, or use trainer builtin or megatron-lm")
