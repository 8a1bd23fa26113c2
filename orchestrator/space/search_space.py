"""The search space: every valid `Layout` for a model, a cluster and a scale.

Candidates are the cross product of plain `SpaceRanges`; dp and the accumulation steps follow
from the world size and the global batch, so every candidate passes `Layout.validate`.
The `amsp` kind replaces zero_stage by every set of AMSP factors that meets the paper's
constraints (3)-(7) on the layout's data-parallel mesh.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.layout import ParallelDims, searched_knobs
from orchestrator.pipeline_split import layer_chunks, split_problem
from orchestrator.space.config import Layout
from orchestrator.space.errors import InvalidConfig
from orchestrator.space.ranges import FIT, SpaceRanges
from orchestrator.space.sharding import ShardingFactors, dp_mesh


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def amsp_factor_sets(s0dp: int, s1dp: int) -> list[ShardingFactors]:
    """All factor sets meeting AMSP constraints (3)-(7) and s_g ∈ {s_p, s_os}."""
    # Per component, (s0, s1) pairs that fill a node before spanning nodes (constraint 7).
    pairs = [(s0, 1) for s0 in _divisors(s0dp)] + [(s0dp, s1) for s1 in _divisors(s1dp) if s1 > 1]
    found = []
    for p, g, o in itertools.product(pairs, repeat=3):
        factors = ShardingFactors(p[0], p[1], g[0], g[1], o[0], o[1])
        try:
            found.append(factors.validate(s0dp, s1dp))
        except InvalidConfig:
            continue
    return found


@dataclass(frozen=True)
class SearchSpace:
    """Ranges plus the shape every candidate must fit; `CampaignSpec.search_space()` builds one."""

    ranges: SpaceRanges
    world_size: int
    gpus_per_node: int
    num_heads: int
    num_layers: int
    global_batch_size: int
    num_experts: int = 0
    seq_len: int | None = None

    def candidates(self, refused: list[str] | None = None,
                   fit: Callable[[Layout], Layout] | None = None,
                   ) -> list[Layout]:
        """All valid configs, in a fixed order (the grid searcher's order), each once;
        `refused` collects why each layout that got as far as the layout checks failed them.
        A layout whose recompute_num_layers is FIT comes with full recompute, passed through
        `fit` (a memory model's fewest layers that fit) when one is given."""
        if self.ranges.kind == "list":
            return self._listed()
        s = self.ranges
        # zero_stage is varied per layout by _shardings (or replaced by AMSP's factors).
        varied = [k for k in searched_knobs() if k.name != "zero_stage"]
        found = []
        for combination in itertools.product(*(getattr(s, k.name) for k in varied)):
            values = dict(zip((k.name for k in varied), combination))
            filled = ParallelDims.filling(self.world_size, tp=values["tp"], pp=values["pp"],
                                          cp=values["cp"])
            mbs = values["micro_batch_size"]
            if filled is None:
                continue
            if any(k.redundant(values, s) for k in varied if k.redundant):
                continue
            if self._split_listed_before(values):
                continue
            dp, per_micro_batch = filled.dp, filled.samples_per_micro_batch(mbs)
            if self.global_batch_size % per_micro_batch:
                continue
            layers = values["recompute_num_layers"]
            base = dict(values, dp=dp, grad_accum_steps=self.global_batch_size // per_micro_batch,
                        recompute_num_layers=None if layers == FIT else layers)
            for sharding in self._shardings(dp, values["tp"]):
                valid = self._valid(base, sharding, refused)
                found += [fit(c) for c in valid] if layers == FIT and fit else valid
        return list(dict.fromkeys(found))  # a fitted layout may be one listed as it is

    def _split_listed_before(self, values: dict) -> bool:
        """Whether a pipeline split listed earlier places the layers as this one does: one
        layout, kept as listed first (docs/costmodel.md, "Pipeline split": where they agree)."""
        listed, split = self.ranges.pipeline_split, values["pipeline_split"]
        pp, v = values["pp"], values["virtual_stages"]
        if pp == 1 or split == listed[0] or split_problem(self.num_layers, pp, v, split):
            return False
        placed = layer_chunks(self.num_layers, pp, v, split)
        return any(split_problem(self.num_layers, pp, v, other) is None
                   and layer_chunks(self.num_layers, pp, v, other) == placed
                   for other in listed[:listed.index(split)])

    def _listed(self) -> list[Layout]:
        """space.configs as given; dp and grad_accum_steps filled in from the scale."""
        found = []
        for index, entry in enumerate(self.ranges.configs):
            fields = dict(entry)
            fields.setdefault("dp", max(1, ParallelDims.of(fields).copies_in(self.world_size)))
            per_micro_batch = ParallelDims.of(fields).samples_per_micro_batch(
                fields.get("micro_batch_size", 1))
            fields.setdefault("grad_accum_steps", max(1, self.global_batch_size // per_micro_batch))
            try:
                config = Layout(**fields)
                config.validate(
                    world_size=self.world_size, num_heads=self.num_heads,
                    num_layers=self.num_layers, global_batch_size=self.global_batch_size,
                    gpus_per_node=self.gpus_per_node, num_experts=self.num_experts,
                    seq_len=self.seq_len,
                )
            except (InvalidConfig, TypeError) as exc:
                raise InvalidConfig(f"configs[{index}]: {exc}") from None
            found.append(config)
        return found

    def _shardings(self, dp: int, tp: int) -> list[dict]:
        if self.ranges.kind == "amsp":
            return [{"sharding": f} for f in amsp_factor_sets(*dp_mesh(dp, tp, self.gpus_per_node))]
        # zero > 0 with dp == 1 shards over nothing: the same as zero 0.
        return [{"zero_stage": z} for z in self.ranges.zero_stage if z == 0 or dp > 1]

    def _valid(self, base: dict, sharding: dict,
               refused: list[str] | None = None) -> list[Layout]:
        try:
            config = Layout(**base, **sharding)
            config.validate(
                world_size=self.world_size, num_heads=self.num_heads,
                num_layers=self.num_layers, global_batch_size=self.global_batch_size,
                gpus_per_node=self.gpus_per_node, num_experts=self.num_experts,
                seq_len=self.seq_len,
            )
        except InvalidConfig as exc:
            if refused is not None:
                refused.append(str(exc))
            return []
        return [config]
