"""The search space: every valid `ParallelConfig` for a model, a cluster and a scale.

Candidates are the cross product of the spec's ranges; dp and the accumulation steps follow
from the world size and the global batch, so every candidate passes `ParallelConfig.validate`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from orchestrator.search_spaces.config import InvalidConfig, ParallelConfig
from orchestrator.spec import CampaignSpec, SpaceSpec


@dataclass(frozen=True)
class SearchSpace:
    space: SpaceSpec
    world_size: int
    num_heads: int
    num_layers: int
    global_batch_size: int

    @classmethod
    def from_spec(cls, spec: CampaignSpec) -> "SearchSpace":
        return cls(
            space=spec.space,
            world_size=spec.world_size,
            num_heads=spec.model.num_heads,
            num_layers=spec.model.num_layers,
            global_batch_size=spec.scale.global_batch_size,
        )

    def candidates(self) -> list[ParallelConfig]:
        """All valid configs, in a fixed order (the grid searcher's order)."""
        found = []
        s = self.space
        for tp, pp, zero, mbs, ac in itertools.product(
            s.tp, s.pp, s.zero_stage, s.micro_batch_size, s.activation_checkpointing
        ):
            config = self._complete(tp, pp, zero, mbs, ac)
            if config is not None:
                found.append(config)
        return found

    def _complete(self, tp: int, pp: int, zero: int, mbs: int, ac: str) -> ParallelConfig | None:
        if self.world_size % (tp * pp):
            return None
        dp = self.world_size // (tp * pp)
        if self.global_batch_size % (mbs * dp):
            return None
        if zero > 0 and dp == 1:
            return None  # nothing to shard over; identical to zero_stage 0
        config = ParallelConfig(
            tp=tp, pp=pp, dp=dp, zero_stage=zero, micro_batch_size=mbs,
            grad_accum_steps=self.global_batch_size // (mbs * dp),
            activation_checkpointing=ac,
        )
        try:
            return config.validate(
                world_size=self.world_size, num_heads=self.num_heads,
                num_layers=self.num_layers, global_batch_size=self.global_batch_size,
            )
        except InvalidConfig:
            return None
