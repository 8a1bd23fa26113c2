"""`trial.command` campaigns: a searched knob whose value never reaches the command would only
run the same program again under another name, so the spec pins it to one value and says so.

A knob reaches the command through its own `{knob}` placeholder, or through a value that
follows from it: dp and the accumulation steps follow from tp, pp, cp and the micro-batch, and
the DeepSpeed config written for each trial (at `{deepspeed_config}`, inside `{trial_dir}`)
holds the batch split, the ZeRO stage and, where cp > 1, `sequence_parallel_size`; `{etp}`, the
expert tensor-parallel degree, is tp's where etp is unset. `{global_batch_size}` is the same for
every layout, so it carries no knob. `{cp_comm_type}` reaches a command only as itself: a
command that holds none is pinned to one type (p2p where the range lists it). `{stage_layers}`,
each pipeline stage's layers, carries the pipeline split.
"""

from __future__ import annotations

from typing import Any

from orchestrator.common.placeholders import placeholders_in
from orchestrator.layout import searched_knobs
from orchestrator.campaign_spec.notices import warn

_CONFIG_FILE = ("deepspeed_config", "trial_dir")
# knob -> the placeholders besides `{knob}` whose value changes with it
ALSO_THROUGH: dict[str, tuple[str, ...]] = {
    "tp": ("dp", "grad_accum_steps", "etp", *_CONFIG_FILE),
    "pp": ("dp", "grad_accum_steps", "stage_layers", *_CONFIG_FILE),
    "cp": ("dp", "grad_accum_steps", *_CONFIG_FILE),
    "micro_batch_size": ("grad_accum_steps", *_CONFIG_FILE),
    "zero_stage": _CONFIG_FILE,
    "pipeline_split": ("stage_layers",),
}


def reached_through(knob: str) -> tuple[str, ...]:
    """The placeholders that carry `knob`'s value to a command, its own first."""
    return (knob, *ALSO_THROUGH.get(knob, ()))


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def pin_unused_knobs(space: Any, command: list[str]) -> None:
    """Narrow each range of `space` whose knob `command` cannot see to one value: the knob's
    default where the range lists it, else the range's first value. `space.kind: list` names
    each layout itself, and AMSP's factors replace the ZeRO stage, so neither is narrowed."""
    if space.kind == "list":
        return
    used = {name for item in command for name in placeholders_in(item)}
    for knob in searched_knobs():
        values = list(dict.fromkeys(getattr(space, knob.name)))
        if len(values) < 2 or (knob.name == "zero_stage" and space.kind == "amsp"):
            continue
        through = reached_through(knob.name)
        if used.intersection(through):
            continue
        value = knob.default if knob.default in values else values[0]
        setattr(space, knob.name, [value])
        names = ", ".join("{" + name + "}" for name in through)
        warn(f"space.{knob.name}: trial.command holds none of {names}, so its values "
             f"{', '.join(map(_shown, values))} would run the same program; pinned to "
             f"{_shown(value)}: put {{{knob.name}}} in trial.command to search it")
