"""Values a spec lists in its space that no layout takes, each with the reason.

A space whose every layout is refused is an error (feasibility.py); a single listed value that
no layout can take is not, so without this note `ep: [3, 8]` on an 8-expert model would search
ep 8 alone and never say why ep 3 went missing.
"""

from __future__ import annotations

from orchestrator.common.errors import SpecError
from orchestrator.layout import Knob, searched_knobs
from orchestrator.space import Layout
from orchestrator.campaign_spec.campaign import CampaignSpec, pipeline_depth_problem
from orchestrator.campaign_spec.feasibility import explain_empty
from orchestrator.campaign_spec.trainer_layouts import runnable


def _shown(value) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _why_unused(spec: CampaignSpec, knob: Knob, value, taken: dict[str, set]) -> str:
    """Why the space narrowed to `knob: [value]`, and every other knob to the values some
    layout takes (so the reason is about this value, not another one missing too), holds no
    layout: the first layout check or trainer rule that refused one, else the reason an empty
    space gets."""
    ranges = {name: [v for v in getattr(spec.space, name) if v in used] or getattr(spec.space, name)
              for name, used in taken.items() if name != knob.name}
    if knob.name == "pp" and (depth := pipeline_depth_problem(
            spec.space.pipeline_split, spec.model.num_layers, value)):
        return depth.removeprefix("space.pp: ")  # it names the split that would take it
    ranges[knob.name] = [value]
    narrowed = spec.model_copy(update={"space": spec.space.model_copy(update=ranges)})
    space = narrowed.search_space()
    refused: list[str] = []
    found = space.candidates(refused)
    if not found:
        return refused[0] if refused else explain_empty(space)
    try:
        runnable(narrowed, found, refused)
    except SpecError:
        return refused[0]
    if knob.active_when is not None and not any(map(knob.active_when[1],
                                                   taken[knob.active_when[0]])):
        decider = knob.active_when[0]
        which = ", ".join(map(_shown, sorted(taken[decider], key=str)))
        return (f"it applies only to some {decider} values, and this space's layouts have "
                f"{decider} {which}; the first listed value, "
                f"{_shown(getattr(spec.space, knob.name)[0])}, stands for them")
    return "every layout it makes is one another listed value makes already"


def unused_values(spec: CampaignSpec, candidates: list[Layout]) -> list[str]:
    """One line per value the spec lists for a searched knob that none of `candidates` (the
    spec's layouts) has, naming the key and why; only keys the spec sets, and only where it
    lists more than one value (a lone refused value empties the space, an error already)."""
    if spec.space.kind == "list" or not candidates:
        return []
    # AMSP's factors replace the ZeRO stages.
    knobs = [k for k in searched_knobs() if k.name != "zero_stage" or spec.space.kind != "amsp"]
    taken = {k.name: {getattr(config, k.name) for config in candidates} for k in knobs}
    lines = []
    for knob in knobs:
        if knob.name not in spec.space.model_fields_set:
            continue
        listed = list(dict.fromkeys(getattr(spec.space, knob.name)))
        if len(listed) < 2:
            continue
        for value in listed:
            if value in taken[knob.name] or value in knob.range_words:
                continue
            lines.append(f"space.{knob.name}: {_shown(value)} is in no layout of this space: "
                         f"{_why_unused(spec, knob, value, taken)}")
    return lines
