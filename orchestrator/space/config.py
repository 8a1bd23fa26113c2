"""`Layout`: one point of the search space, and the layout checks it must pass. Its
knob fields come from the layout schema (orchestrator/layout/); sharding factors are its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from orchestrator.layout import (
    CHECKPOINT_MODES,
    PP_SCHEDULES,
    SHARDING_FACTORS,
    ParallelDims,
    knobs,
    layout_key,
    layout_problems,
    with_knob_fields,
)
from orchestrator.space.errors import InvalidConfig
from orchestrator.pipeline_split import busiest_chunk_layers, split_problem, stage_layers
from orchestrator.space.sharding import ShardingFactors, dp_mesh

__all__ = ["CHECKPOINT_MODES", "PP_SCHEDULES", "Layout"]


@dataclass(frozen=True, order=True)
@with_knob_fields
class Layout:
    """How one training step is laid out across ranks: one field per layout knob, then
    `sharding`.

    zero_stage follows DeepSpeed: 0 = DDP, 1 = optimizer states sharded, 2 = + gradients,
    3 = + parameters (FSDP full shard), each over the `dp` ranks. `sharding`, when set, gives
    AMSP's six factors instead and overrides zero_stage. `virtual_stages` > 1 only with the
    interleaved pipeline schedule. `recompute_num_layers`, with full checkpointing, recomputes
    only the first that many layers of each pipeline stage (virtual chunk), Megatron-LM's block
    method and InternEvo's checkpoint fraction: the fewest that fit buy back compute that
    recomputing every layer spends; None recomputes them all.
    """

    sharding: ShardingFactors | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sharding, dict):  # from JSON
            object.__setattr__(self, "sharding", ShardingFactors(**self.sharding))
        problems = layout_problems(self.knob_values())
        if problems:
            raise InvalidConfig(problems[0])

    def knob_values(self) -> dict[str, Any]:
        return {k.name: getattr(self, k.name) for k in knobs()}

    @property
    def dims(self) -> ParallelDims:
        """This layout's sizes (world, model-parallel ranks, gradient group, ...)."""
        return ParallelDims.of(self)

    def recompute_fraction(self, num_layers: int) -> float:
        """The share of the layers whose forward the backward replays (0 without full
        recompute)."""
        if self.activation_checkpointing != "full":
            return 0.0
        if self.recompute_num_layers is None:
            return 1.0
        return min(1.0, self.recompute_num_layers / self.busiest_chunk_layers(num_layers))

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Transformer layers on each pipeline rank (orchestrator/pipeline_split.py)."""
        return stage_layers(num_layers, self.pp, self.virtual_stages, self.pipeline_split)

    def busiest_stage_layers(self, num_layers: int) -> int:
        """Layers of the pipeline rank holding the most: the one every step waits on."""
        return max(self.stage_layers(num_layers))

    def busiest_chunk_layers(self, num_layers: int) -> int:
        return busiest_chunk_layers(num_layers, self.pp, self.virtual_stages,
                                    self.pipeline_split)

    @property
    def world_size(self) -> int:
        return self.dims.world

    def global_batch_size(self) -> int:
        return self.dims.samples_per_step(self.micro_batch_size, self.grad_accum_steps)

    def factors(self, gpus_per_node: int, zero_engine: str = "deepspeed") -> ShardingFactors:
        """The AMSP factors of this layout: explicit, or those of its ZeRO stage run on
        `zero_engine` (the trainer's: costmodel/zero_engine.py)."""
        if self.sharding is not None:
            return self.sharding
        return ShardingFactors.from_zero_stage(
            self.zero_stage, *dp_mesh(self.dp, self.tp, gpus_per_node), engine=zero_engine
        )

    def validate(
        self,
        *,
        world_size: int,
        num_heads: int,
        num_layers: int,
        global_batch_size: int,
        gpus_per_node: int | None = None,
        num_experts: int = 0,
        seq_len: int | None = None,
    ) -> "Layout":
        """Raise InvalidConfig unless this layout fits the world, the model and the batch."""
        if self.world_size != world_size:
            raise InvalidConfig(
                f"tp({self.tp}) * pp({self.pp}) * {self._cp_part()}dp({self.dp}) = "
                f"{self.world_size} != WORLD_SIZE({world_size})"
            )
        if num_heads % self.tp:
            raise InvalidConfig(f"tp({self.tp}) does not divide num_heads({num_heads})")
        if split := split_problem(num_layers, self.pp, self.virtual_stages, self.pipeline_split):
            raise InvalidConfig(split)
        if self.global_batch_size() != global_batch_size:
            raise InvalidConfig(
                f"micro_batch_size({self.micro_batch_size}) * grad_accum_steps"
                f"({self.grad_accum_steps}) * dp({self.dp}) = {self.global_batch_size()} "
                f"!= GLOBAL_BATCH({global_batch_size})"
            )
        chunk = self.busiest_chunk_layers(num_layers)
        if self.recompute_num_layers is not None and self.recompute_num_layers >= chunk:
            raise InvalidConfig(
                f"recompute_num_layers({self.recompute_num_layers}) must be below the "
                f"{chunk} layers of a pipeline stage; null recomputes them all"
            )
        self._shape_rules_hold(seq_len, num_heads)
        self._experts_fit(num_experts)
        if self.sharding is not None and gpus_per_node is not None:
            self.sharding.validate(*dp_mesh(self.dp, self.tp, gpus_per_node))
        return self

    def _cp_part(self) -> str:
        return f"cp({self.cp}) * " if self.cp > 1 else ""

    def _shape_rules_hold(self, seq_len: int | None, num_heads: int) -> None:
        """The layout schema's rules that see the model's shape (layout/rules.py): seq_len
        splits into cp's 2 x cp chunks, and Ulysses (a2a) gives each cp rank whole heads."""
        model = SimpleNamespace(seq_len=seq_len, num_heads=num_heads)
        if problems := layout_problems(self.knob_values(), model):
            raise InvalidConfig(problems[0])

    def _experts_fit(self, num_experts: int) -> None:
        """Expert parallelism needs experts to split: Megatron-Core, torchtitan and DeepSpeed
        each require num_experts % ep == 0."""
        if self.ep > 1 and num_experts == 0:
            raise InvalidConfig(f"ep({self.ep}) > 1 needs a mixture-of-experts model "
                                "(model.num_experts)")
        if num_experts and num_experts % self.ep:
            raise InvalidConfig(f"ep({self.ep}) does not divide num_experts({num_experts})")
        if self.etp not in (None, self.tp) and num_experts == 0:
            raise InvalidConfig(f"etp({self.etp}) needs a mixture-of-experts model "
                                "(model.num_experts)")

    def key(self) -> str:
        """A stable short identity, used to recognise a config already tried."""
        key = layout_key(self.knob_values())
        if self.sharding is not None:
            key += "-amsp" + "".join(map(str, self.sharding.as_tuple()))
            if self.sharding.secondary > 1:
                key += f"h{self.sharding.secondary}"
            if self.sharding.engine != "amsp":
                key += f"-{self.sharding.engine}"
        return key

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["sharding"] = self.sharding.to_dict() if self.sharding else None
        return data

    def to_params(self) -> dict[str, Any]:
        """Flat fields (sharding factors spread out), for trackers and external commands."""
        data = {k: v for k, v in self.to_dict().items() if k != "sharding"}
        data.update(self.sharding.to_dict() if self.sharding else {})
        return data

    @classmethod
    def from_params(cls, params: dict[str, str]) -> "Layout":
        """Back from `to_params` as text (MLflow params): types restored, factors regrouped."""
        typed: dict[str, Any] = {k.name: k.parse(params[k.name]) for k in knobs()
                                 if k.name in params}
        if all(n in params for n in SHARDING_FACTORS):
            names = (*SHARDING_FACTORS, "secondary")
            typed["sharding"] = ShardingFactors(
                **{n: int(params[n]) for n in names if n in params},
                **({"engine": params["engine"]} if "engine" in params else {}))
        return cls(**typed)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Layout":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# The name earlier releases gave the class: their pickles (a Slurm job's trial request, queued
# before an upgrade) name orchestrator.space.config.ParallelConfig.
ParallelConfig = Layout
