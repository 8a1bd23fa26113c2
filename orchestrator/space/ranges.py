"""`SpaceRanges`: the plain ranges a search space draws its candidates from.

The spec's `space:` section turns into one of these; the search space never sees YAML or the
spec. There is one range per searched knob of the layout schema (orchestrator/layout/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.layout import add_fields, searched_knobs

SPACE_KINDS = ("megatron-3d", "amsp", "list")
# recompute_num_layers: the fewest layers that fit, resolved per layout by a memory model.
FIT = "fit"


def _with_ranges(cls: type) -> type:
    """A tuple field per searched knob, after the class's own fields, defaulting to the
    knob's default range."""
    return add_fields(cls, {k.name: ("tuple", tuple(k.space)) for k in searched_knobs()},
                      ahead=False)


@dataclass(frozen=True)
@_with_ranges
class SpaceRanges:
    """Values to take the cross product of; dp follows from the world size.

    kind: `megatron-3d` varies zero_stage; `amsp` varies AMSP's six sharding factors instead;
    `list` takes exactly the layouts in `configs` (each a mapping of Layout fields).
    With full recompute, `recompute_num_layers` may hold FIT: the fewest layers that fit.
    """

    kind: str = "megatron-3d"
    configs: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in SPACE_KINDS:
            raise ValueError(
                f"space kind {self.kind!r} is unknown; choose one of {', '.join(SPACE_KINDS)}"
            )
        for k in searched_knobs():
            if not getattr(self, k.name):
                raise ValueError(f"space range {k.name} is empty; give at least one value")
