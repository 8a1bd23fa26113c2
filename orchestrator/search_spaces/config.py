"""`ParallelConfig`: one point of the search space, and the layout checks it must pass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

CHECKPOINT_MODES = ("none", "selective", "full")


class InvalidConfig(ValueError):
    """A layout that cannot run; the message names every factor involved."""


@dataclass(frozen=True, order=True)
class ParallelConfig:
    """How one training step is laid out across ranks.

    zero_stage follows DeepSpeed: 0 = DDP, 1 = optimizer states sharded, 2 = + gradients,
    3 = + parameters (FSDP full shard), each over the `dp` ranks.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 0
    micro_batch_size: int = 1
    grad_accum_steps: int = 1
    activation_checkpointing: str = "none"

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch_size", "grad_accum_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidConfig(f"{name}({value!r}) must be a positive integer")
        if self.zero_stage not in (0, 1, 2, 3):
            raise InvalidConfig(f"zero_stage({self.zero_stage!r}) must be 0, 1, 2 or 3")
        if self.activation_checkpointing not in CHECKPOINT_MODES:
            raise InvalidConfig(
                f"activation_checkpointing({self.activation_checkpointing!r}) must be one of "
                f"{', '.join(CHECKPOINT_MODES)}"
            )

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.dp

    def validate(
        self, *, world_size: int, num_heads: int, num_layers: int, global_batch_size: int
    ) -> "ParallelConfig":
        """Raise InvalidConfig unless this layout fits the world, the model and the batch."""
        if self.world_size != world_size:
            raise InvalidConfig(
                f"tp({self.tp}) * pp({self.pp}) * dp({self.dp}) = {self.world_size} "
                f"!= WORLD_SIZE({world_size})"
            )
        if num_heads % self.tp:
            raise InvalidConfig(f"tp({self.tp}) does not divide num_heads({num_heads})")
        if num_layers % self.pp:
            raise InvalidConfig(f"pp({self.pp}) does not divide num_layers({num_layers})")
        if self.global_batch_size() != global_batch_size:
            raise InvalidConfig(
                f"micro_batch_size({self.micro_batch_size}) * grad_accum_steps"
                f"({self.grad_accum_steps}) * dp({self.dp}) = {self.global_batch_size()} "
                f"!= GLOBAL_BATCH({global_batch_size})"
            )
        return self

    def key(self) -> str:
        """A stable short identity, used to recognise a config already tried."""
        return (
            f"tp{self.tp}-pp{self.pp}-dp{self.dp}-z{self.zero_stage}-mbs{self.micro_batch_size}"
            f"-gas{self.grad_accum_steps}-ac{self.activation_checkpointing}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ParallelConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
