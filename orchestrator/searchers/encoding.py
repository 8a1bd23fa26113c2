"""Knobs of a candidate list, for searchers that think in dimensions rather than in configs.

A model-based searcher proposes a point of the knob grid (one value per knob); not every point
is a valid layout (tp · pp must divide the world, ...), so `nearest` maps a point to the closest
valid candidate not yet taken: ordinal distance on numeric knobs, 0/1 on categorical ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.search_spaces import ParallelConfig

KNOBS = ("tp", "pp", "sharding", "micro_batch_size", "activation_checkpointing",
         "recompute_num_layers", "sequence_parallel", "pp_schedule", "virtual_stages", "compile")
NUMERIC = {"tp", "pp", "micro_batch_size", "virtual_stages"}


def knob_values(config: ParallelConfig) -> dict[str, Any]:
    """A config as knob values; `sharding` is the ZeRO stage or the AMSP factors as text."""
    sharding = (f"amsp{config.sharding.as_tuple()}" if config.sharding is not None
                else f"zero{config.zero_stage}")
    return {
        "tp": config.tp, "pp": config.pp, "sharding": sharding,
        "micro_batch_size": config.micro_batch_size,
        "activation_checkpointing": config.activation_checkpointing,
        "recompute_num_layers": config.recompute_num_layers,
        "sequence_parallel": config.sequence_parallel, "pp_schedule": config.pp_schedule,
        "virtual_stages": config.virtual_stages, "compile": config.compile,
    }


@dataclass
class KnobSpace:
    candidates: list[ParallelConfig]
    values: dict[str, list]  # knob -> its distinct values, sorted; only knobs that vary

    @classmethod
    def of(cls, candidates: list[ParallelConfig]) -> "KnobSpace":
        seen: dict[str, set] = {k: set() for k in KNOBS}
        for config in candidates:
            for knob, value in knob_values(config).items():
                seen[knob].add(value)
        values = {k: sorted(v, key=str) if k not in NUMERIC else sorted(v)
                  for k, v in seen.items() if len(v) > 1}
        return cls(candidates, values)

    def point(self, config: ParallelConfig) -> dict[str, Any]:
        values = knob_values(config)
        return {k: values[k] for k in self.values}

    def _distance(self, a: dict[str, Any], b: dict[str, Any]) -> float:
        total = 0.0
        for knob, values in self.values.items():
            if knob in NUMERIC:
                total += abs(values.index(a[knob]) - values.index(b[knob]))
            else:
                total += 0.0 if a[knob] == b[knob] else 1.0
        return total

    def nearest(self, point: dict[str, Any], taken: set[ParallelConfig]) -> ParallelConfig | None:
        best, best_distance = None, float("inf")
        for config in self.candidates:
            if config in taken:
                continue
            distance = self._distance(point, self.point(config))
            if distance < best_distance:
                best, best_distance = config, distance
                if distance == 0:
                    break
        return best
