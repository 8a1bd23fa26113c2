"""The campaign spec's sections other than the backend, the trial and the space: scale,
objective, search, budget and tracking, each a strict pydantic model (an unknown key is an error)."""

from __future__ import annotations

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

from orchestrator.layout import MAX_FACTOR
from orchestrator.search.repeats import MAX_REPEATS
from orchestrator.campaign_spec.strings import NAME_MAX, NAME_PATTERN

# Bounds far beyond any real run, so absurd sizes are errors rather than hours of enumeration.
MAX_NODES = 65_536
MAX_GPUS_PER_NODE = 1_024
MAX_COUNT = 10_000_000  # steps, trials, batch sizes
MAX_SEED = 2**32 - 1
MAX_VALUES = 64  # values in one space range


class Strict(BaseModel):
    """A spec section: unknown keys are errors, so a typo never passes silently; numbers are
    numbers (`steps: true` is an error, an int is a fine float), finite."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def is_saved(info: ValidationInfo) -> bool:
    """Whether this is a campaign's own saved spec (`spec_from_dict(..., saved=True)`): it keeps
    what it ran with where a new spec's checks have since grown stricter."""
    return bool((info.context or {}).get("saved"))


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
    # Tune small, choose for large: each trial runs on this many nodes with the same work per
    # GPU (the layout's tp, pp, cp, ep, micro-batch, recompute and micro-batches per replica,
    # fewer data-parallel replicas); `nodes` stays the target the campaign chooses for.
    slice_nodes: int | None = Field(default=None, gt=0, le=MAX_NODES,
                                    description="nodes each search trial runs on")

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

    @model_validator(mode="after")
    def _slice_is_part_of_the_target(self) -> "ScaleSpec":
        """A slice keeps each replica's batch, so the global batch must shrink with it to a
        whole number of sequences."""
        n = self.slice_nodes
        if n is None:
            return self
        if n >= self.nodes:
            raise ValueError(f"scale.slice_nodes: {n} is not fewer than scale.nodes "
                             f"({self.nodes}); a slice is part of the target, or leave it out")
        if self.nodes % n:
            raise ValueError(f"scale.slice_nodes: {n} does not divide scale.nodes "
                             f"({self.nodes}); choose a divisor, so that the target is whole "
                             "slices")
        if self.global_batch_size % (self.nodes // n):
            raise ValueError(f"scale.slice_nodes: the global batch {self.global_batch_size} "
                             f"does not split into {self.nodes // n} slices of {n} node(s); "
                             "choose slice_nodes so that it does")
        if self.study:
            raise ValueError("scale.slice_nodes: a slice campaign confirms at scale.nodes "
                             "itself; leave out scale.study")
        return self


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
    # cost-guided: the most times one layout is measured, its first measurement included
    # (search/repeats.py says how the default was chosen); 1 measures no layout twice.
    max_repeats: int = Field(default=MAX_REPEATS, ge=1, le=MAX_COUNT,
                             description="measurements of one layout, repeats included")
    fidelity: FidelitySpec | None = None
    # Seed this campaign with another's results: its name under the same runs directory.
    warm_start: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=NAME_MAX)

    @model_validator(mode="after")
    def _margin_needs_cost_guided(self, info: ValidationInfo) -> "SearchSpec":
        """Only the cost-guided searcher bounds what is left to gain, so only it can stop on a
        margin; elsewhere the margin would be accepted and never used (a saved spec keeps it)."""
        if self.stop_margin and self.algorithm != "cost-guided" and not is_saved(info):
            raise ValueError(f"search.stop_margin: only the cost-guided searcher stops on a "
                             f"margin, and algorithm is {self.algorithm}; remove stop_margin, "
                             "or set algorithm: cost-guided")
        return self

    @model_validator(mode="after")
    def _repeats_need_cost_guided(self, info: ValidationInfo) -> "SearchSpec":
        """Only the cost-guided searcher measures a layout again; elsewhere a cap other than
        the default would be accepted and never used (a saved spec keeps it). The default is
        accepted anywhere: a spec written out in full (`model_dump`) names it."""
        if (self.max_repeats != MAX_REPEATS and self.algorithm != "cost-guided"
                and not is_saved(info)):
            raise ValueError(f"search.max_repeats: only the cost-guided searcher measures a "
                             f"layout again, and algorithm is {self.algorithm}; remove "
                             "max_repeats, or set algorithm: cost-guided")
        return self


class BudgetSpec(Strict):
    max_trials: int = Field(default=8, gt=0, le=MAX_COUNT, description="trials run on the backend")
    max_concurrent: int = Field(default=1, gt=0, le=MAX_GPUS_PER_NODE * 64)
    wall_clock_s: float | None = Field(default=None, gt=0, description="stop submitting after")
    gpu_hours: float | None = Field(default=None, gt=0, description="world size x trial time")
    # A slice campaign's full-scale trials, in the order its prediction ranks them, while
    # their predicted GPU-hours fit; left out, the one layout ranked first.
    confirm_gpu_hours: float | None = Field(default=None, gt=0,
                                            description="full-scale trials of a slice campaign")
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
