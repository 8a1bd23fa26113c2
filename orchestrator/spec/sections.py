"""The campaign spec's sections other than the backend and the trial: scale, space, objective,
search, budget and tracking, each a strict pydantic model (an unknown key is an error)."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator.search_spaces import SpaceRanges
from orchestrator.spec.strings import NAME_MAX, NAME_PATTERN

CheckpointMode = Literal["none", "selective", "full"]
ZeroStage = Literal[0, 1, 2, 3]
# Bounds far beyond any real run, so absurd sizes are errors rather than hours of enumeration.
MAX_NODES = 65_536
MAX_GPUS_PER_NODE = 1_024
MAX_FACTOR = 65_536  # tp, pp, micro-batch size, virtual stages
MAX_COUNT = 10_000_000  # steps, trials, batch sizes
MAX_SEED = 2**32 - 1
MAX_VALUES = 64  # values in one space range
MAX_COMBINATIONS = 200_000  # the product of the space ranges' lengths


class Strict(BaseModel):
    """A spec section: unknown keys are errors, so a typo never passes silently; numbers are
    numbers (`steps: true` is an error, an int is a fine float), finite."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def is_saved(info: ValidationInfo) -> bool:
    """Whether this is a campaign's own saved spec (`spec_from_dict(..., saved=True)`): it keeps
    what it ran with where a new spec's checks have since grown stricter."""
    return bool((info.context or {}).get("saved"))


def no_bools(values: Any) -> Any:
    """Literal[0, 1, 2, 3] takes `true` as 1; a ZeRO stage is a number."""
    items = values if isinstance(values, list) else [values]
    if any(isinstance(v, bool) for v in items):
        raise ValueError("a ZeRO stage is a number 0-3, not true/false")
    return values


def factor(default: int | None = None) -> Any:
    """A parallel factor: a positive integer, bounded."""
    return Field(default=default, gt=0, le=MAX_FACTOR)


class ScaleSpec(Strict):
    nodes: int = Field(default=1, gt=0, le=MAX_NODES)
    gpus_per_node: int | None = Field(default=None, gt=0, le=MAX_GPUS_PER_NODE,
                                      description="default: the cluster's")
    global_batch_size: int = Field(gt=0, le=MAX_COUNT, description="sequences per optimizer step")
    # After tuning, run the best layout at each node count: weak scaling keeps the batch per
    # GPU (global batch grows with nodes), strong scaling keeps the global batch.
    study: Literal["weak", "strong"] | None = None
    study_nodes: list[int] = Field(default_factory=list, max_length=MAX_VALUES)

    @field_validator("study_nodes")
    @classmethod
    def _nodes_bounded(cls, values: list[int]) -> list[int]:
        if any(n > MAX_NODES for n in values):
            raise ValueError(f"node counts must be at most {MAX_NODES}")
        return values

    @model_validator(mode="after")
    def _study_needs_nodes(self) -> "ScaleSpec":
        if self.study and not self.study_nodes:
            raise ValueError("scale.study_nodes: list the node counts of the scaling study")
        if any(n < 1 for n in self.study_nodes):
            raise ValueError("scale.study_nodes: node counts must be positive")
        return self


class ShardingEntry(Strict):
    """AMSP's factors of one listed layout (see ShardingFactors)."""

    s0p: int = factor(1)
    s1p: int = factor(1)
    s0g: int = factor(1)
    s1g: int = factor(1)
    s0os: int = factor(1)
    s1os: int = factor(1)
    secondary: int = factor(1)


class LayoutEntry(Strict):
    """One layout of `space.kind: list`: ParallelConfig's fields, each optional."""

    tp: int | None = factor()
    pp: int | None = factor()
    dp: int | None = factor()
    zero_stage: ZeroStage | None = None
    micro_batch_size: int | None = factor()
    grad_accum_steps: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    activation_checkpointing: CheckpointMode | None = None
    recompute_num_layers: int | None = Field(default=None, gt=0, le=MAX_FACTOR)
    sequence_parallel: bool | None = None
    pp_schedule: Literal["gpipe", "1f1b", "interleaved"] | None = None
    virtual_stages: int | None = factor()
    compile: bool | None = None
    sharding: ShardingEntry | None = None

    _stage_is_a_number = field_validator("zero_stage", mode="before")(no_bools)

    def fields(self) -> dict[str, Any]:
        """The fields given, as ParallelConfig takes them."""
        return self.model_dump(exclude_none=True)


class SpaceSpec(Strict):
    """Ranges the search space takes its candidates from; dp follows from world size."""

    # megatron-3d: ZeRO stages; amsp: AMSP's six sharding factors instead of zero_stage;
    # list: exactly the layouts in `configs` (each a mapping of ParallelConfig fields).
    kind: Literal["megatron-3d", "amsp", "list"] = "megatron-3d"
    configs: list[LayoutEntry] = Field(default_factory=list, max_length=1_000)
    tp: list[int] = Field(default=[1], min_length=1, max_length=MAX_VALUES)
    pp: list[int] = Field(default=[1], min_length=1, max_length=MAX_VALUES)
    zero_stage: list[ZeroStage] = Field(default=[0, 1, 2, 3], min_length=1, max_length=MAX_VALUES)
    micro_batch_size: list[int] = Field(default=[1, 2, 4, 8], min_length=1, max_length=MAX_VALUES)
    activation_checkpointing: list[CheckpointMode] = Field(
        default=["none", "selective", "full"], min_length=1, max_length=MAX_VALUES
    )
    # With full recompute: the layers of each pipeline stage that recompute (null: all; fit:
    # the fewest that fit by the memory model, none if nothing needs to).
    recompute_num_layers: list[int | Literal["fit"] | None] = Field(
        default=[None], min_length=1, max_length=MAX_VALUES)
    sequence_parallel: list[bool] = Field(default=[False], min_length=1, max_length=MAX_VALUES)
    pp_schedule: list[Literal["gpipe", "1f1b", "interleaved"]] = Field(
        default=["1f1b"], min_length=1, max_length=MAX_VALUES)
    virtual_stages: list[int] = Field(default=[1], min_length=1, max_length=MAX_VALUES)
    compile: list[bool] = Field(default=[False], min_length=1, max_length=MAX_VALUES)

    _stages_are_numbers = field_validator("zero_stage", mode="before")(no_bools)

    @field_validator("recompute_num_layers", mode="before")
    @classmethod
    def _layer_counts(cls, values: Any) -> Any:
        """One message for any wrong entry, rather than one per branch of the union."""
        if not isinstance(values, list):
            return values
        bad = [v for v in values if not (v is None or v == "fit" or (
            isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_FACTOR))]
        if bad:
            raise ValueError(f"values must be layer counts from 1 to {MAX_FACTOR}, null (every "
                             f"layer) or 'fit' (the fewest that fit), got {bad[0]!r}")
        return values

    @model_validator(mode="after")
    def _list_needs_configs(self) -> "SpaceSpec":
        if (self.kind == "list") != bool(self.configs):
            raise ValueError("space.configs: give configs exactly when space.kind is 'list'")
        names = ("tp", "pp", "zero_stage", "micro_batch_size", "activation_checkpointing",
                 "recompute_num_layers", "sequence_parallel", "pp_schedule", "virtual_stages",
                 "compile")
        combinations = math.prod(len(set(getattr(self, n))) for n in names)
        if combinations > MAX_COMBINATIONS:
            raise ValueError(f"space: the ranges make {combinations:,} combinations (at most "
                             f"{MAX_COMBINATIONS:,}); narrow tp, pp, micro_batch_size, ...")
        return self

    @field_validator("tp", "pp", "micro_batch_size", "virtual_stages")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        bad = [v for v in values if v < 1 or v > MAX_FACTOR]
        if bad:
            raise ValueError(f"values must be integers from 1 to {MAX_FACTOR}, got "
                             f"{', '.join(map(str, bad[:5]))}")
        return sorted(set(values))

    def ranges(self) -> SpaceRanges:
        """The same ranges as the plain tuples the search space takes."""
        return SpaceRanges(
            kind=self.kind, configs=tuple(c.fields() for c in self.configs), tp=tuple(self.tp),
            pp=tuple(self.pp), zero_stage=tuple(self.zero_stage),
            micro_batch_size=tuple(self.micro_batch_size),
            activation_checkpointing=tuple(self.activation_checkpointing),
            recompute_num_layers=tuple(self.recompute_num_layers),
            sequence_parallel=tuple(self.sequence_parallel), pp_schedule=tuple(self.pp_schedule),
            virtual_stages=tuple(self.virtual_stages), compile=tuple(self.compile),
        )


# Which way each metric improves: a throughput is better larger, a step time smaller.
METRIC_DIRECTION = {"tokens_per_s": "max", "tokens_per_s_per_gpu": "max",
                    "tflops_per_gpu": "max", "mfu": "max", "step_time_s": "min"}


class ObjectiveSpec(Strict):
    """The metric and its direction; `mode` left out follows the metric. A mode against the
    metric's direction would crown the worst layout, so a new spec may not state one; a
    campaign saved by an earlier version keeps the mode it ran with (validation context
    `saved`)."""

    metric: Literal[
        "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s"
    ] = "tokens_per_s"
    mode: Literal["max", "min"] = "max"

    @model_validator(mode="before")
    @classmethod
    def _mode_from_metric(cls, data: Any) -> Any:
        metric = data.get("metric", "tokens_per_s") if isinstance(data, dict) else None
        if isinstance(data, dict) and "mode" not in data and isinstance(metric, str):
            data = {**data, "mode": METRIC_DIRECTION.get(metric, "max")}
        return data

    @model_validator(mode="after")
    def _mode_matches_metric(self, info: ValidationInfo) -> "ObjectiveSpec":
        natural = METRIC_DIRECTION[self.metric]
        if self.mode != natural and not is_saved(info):
            raise ValueError(f"objective.mode: {self.metric} is better "
                             f"{'larger' if natural == 'max' else 'smaller'}; set mode: "
                             f"{natural}, or leave mode out")
        return self


class FidelitySpec(Strict):
    """Successive halving: screen with few steps, re-measure the best with `trial.steps`."""

    screening_steps: int = Field(gt=0, le=MAX_COUNT, description="timed steps of a screening trial")
    keep_fraction: float = Field(default=0.25, gt=0, le=1, description="share re-measured")
    min_screened: int = Field(default=4, gt=0, le=MAX_COUNT,
                              description="screened trials before promoting")


class SearchSpec(Strict):
    algorithm: Literal["grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided"] = (
        "grid"
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # cost-guided: stop once no candidate's upper bound is within this of the best measured.
    stop_margin: float = Field(default=0.0, ge=0, lt=1)
    fidelity: FidelitySpec | None = None
    # Seed this campaign with another's results: its name under the same runs directory.
    warm_start: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=NAME_MAX)


class BudgetSpec(Strict):
    max_trials: int = Field(default=8, gt=0, le=MAX_COUNT, description="trials run on the backend")
    max_concurrent: int = Field(default=1, gt=0, le=MAX_GPUS_PER_NODE * 64)
    wall_clock_s: float | None = Field(default=None, gt=0, description="stop submitting after")
    gpu_hours: float | None = Field(default=None, gt=0, description="world size x trial time")
    patience: int | None = Field(default=None, gt=0, le=MAX_COUNT,
                                 description="trials without improvement")


# A tracking URI names its store's scheme: sqlite:///..., postgresql://..., http(s)://...,
# file:///..., databricks. A bare word would be taken by MLflow as a folder and fail later.
TRACKING_URI = re.compile(r"databricks|[A-Za-z][A-Za-z0-9+.-]*:\S*")


class TrackingSpec(Strict):
    uri: str | None = Field(default=None, description="default: sqlite at <runs_dir>/mlflow.db")
    runs_dir: str = "runs"
    enabled: bool = True
    # While MLflow is unreachable, results stay in the journal; retry this often.
    retry_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _a_uri(self, info: ValidationInfo) -> "TrackingSpec":
        """A URI tracking will use (not one it is told to leave alone)."""
        uri = self.uri
        if (self.enabled and uri is not None and not TRACKING_URI.fullmatch(uri)
                and not is_saved(info)):
            raise ValueError(f"tracking.uri: {uri[:80]!r} is not a tracking URI; give one such "
                             "as sqlite:///runs/mlflow.db or http://127.0.0.1:5000")
        return self
