"""`SpaceRanges`: the plain ranges a search space draws its candidates from.

The spec's `space:` section turns into one of these; the search space never sees YAML or the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SPACE_KINDS = ("megatron-3d", "amsp", "list")
# recompute_num_layers: the fewest layers that fit, resolved per layout by a memory model.
FIT = "fit"


@dataclass(frozen=True)
class SpaceRanges:
    """Values to take the cross product of; dp follows from the world size.

    kind: `megatron-3d` varies zero_stage; `amsp` varies AMSP's six sharding factors instead;
    `list` takes exactly the layouts in `configs` (each a mapping of ParallelConfig fields).
    """

    kind: str = "megatron-3d"
    configs: tuple[dict[str, Any], ...] = ()
    tp: tuple[int, ...] = (1,)
    pp: tuple[int, ...] = (1,)
    zero_stage: tuple[int, ...] = (0, 1, 2, 3)
    micro_batch_size: tuple[int, ...] = (1, 2, 4, 8)
    activation_checkpointing: tuple[str, ...] = ("none", "selective", "full")
    # With "full": layers recomputed per pipeline stage (None = all, FIT = the fewest that
    # fit); other modes ignore it.
    recompute_num_layers: tuple[int | str | None, ...] = (None,)
    sequence_parallel: tuple[bool, ...] = (False,)
    pp_schedule: tuple[str, ...] = ("1f1b",)
    virtual_stages: tuple[int, ...] = (1,)
    compile: tuple[bool, ...] = (False,)

    def __post_init__(self) -> None:
        if self.kind not in SPACE_KINDS:
            raise ValueError(
                f"space kind {self.kind!r} is unknown; choose one of {', '.join(SPACE_KINDS)}"
            )
        for name in ("tp", "pp", "zero_stage", "micro_batch_size", "activation_checkpointing",
                     "recompute_num_layers", "sequence_parallel", "pp_schedule",
                     "virtual_stages", "compile"):
            if not getattr(self, name):
                raise ValueError(f"space range {name} is empty; give at least one value")
