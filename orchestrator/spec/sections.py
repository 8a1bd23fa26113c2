"""The campaign spec's sections other than the backend and the trial: scale, space, objective,
search, budget and tracking, each a strict pydantic model (an unknown key is an error)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.search_spaces import SpaceRanges

CheckpointMode = Literal["none", "selective", "full"]


class Strict(BaseModel):
    """A spec section: unknown keys are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid")


class ScaleSpec(Strict):
    nodes: int = Field(default=1, gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0, description="default: the cluster's")
    global_batch_size: int = Field(gt=0, description="sequences per optimizer step")
    # After tuning, run the best layout at each node count: weak scaling keeps the batch per
    # GPU (global batch grows with nodes), strong scaling keeps the global batch.
    study: Literal["weak", "strong"] | None = None
    study_nodes: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _study_needs_nodes(self) -> "ScaleSpec":
        if self.study and not self.study_nodes:
            raise ValueError("scale.study_nodes: list the node counts of the scaling study")
        if any(n < 1 for n in self.study_nodes):
            raise ValueError("scale.study_nodes: node counts must be positive")
        return self


class SpaceSpec(Strict):
    """Ranges the search space takes its candidates from; dp follows from world size."""

    # megatron-3d: ZeRO stages; amsp: AMSP's six sharding factors instead of zero_stage;
    # list: exactly the layouts in `configs` (each a mapping of ParallelConfig fields).
    kind: Literal["megatron-3d", "amsp", "list"] = "megatron-3d"
    configs: list[dict[str, Any]] = Field(default_factory=list)
    tp: list[int] = Field(default=[1], min_length=1)
    pp: list[int] = Field(default=[1], min_length=1)
    zero_stage: list[Literal[0, 1, 2, 3]] = Field(default=[0, 1, 2, 3], min_length=1)
    micro_batch_size: list[int] = Field(default=[1, 2, 4, 8], min_length=1)
    activation_checkpointing: list[CheckpointMode] = Field(
        default=["none", "selective", "full"], min_length=1
    )
    sequence_parallel: list[bool] = Field(default=[False], min_length=1)
    pp_schedule: list[Literal["gpipe", "1f1b", "interleaved"]] = Field(default=["1f1b"], min_length=1)
    virtual_stages: list[int] = Field(default=[1], min_length=1)
    compile: list[bool] = Field(default=[False], min_length=1)

    @model_validator(mode="after")
    def _list_needs_configs(self) -> "SpaceSpec":
        if (self.kind == "list") != bool(self.configs):
            raise ValueError("space.configs: give configs exactly when space.kind is 'list'")
        return self

    @field_validator("tp", "pp", "micro_batch_size", "virtual_stages")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"values must be positive integers, got {bad}")
        return sorted(set(values))

    def ranges(self) -> SpaceRanges:
        """The same ranges as the plain tuples the search space takes."""
        return SpaceRanges(
            kind=self.kind, configs=tuple(dict(c) for c in self.configs), tp=tuple(self.tp),
            pp=tuple(self.pp), zero_stage=tuple(self.zero_stage),
            micro_batch_size=tuple(self.micro_batch_size),
            activation_checkpointing=tuple(self.activation_checkpointing),
            sequence_parallel=tuple(self.sequence_parallel), pp_schedule=tuple(self.pp_schedule),
            virtual_stages=tuple(self.virtual_stages), compile=tuple(self.compile),
        )


class ObjectiveSpec(Strict):
    # step_time_s is one to minimise: pair it with `mode: min`.
    metric: Literal[
        "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s"
    ] = "tokens_per_s"
    mode: Literal["max", "min"] = "max"


class FidelitySpec(Strict):
    """Successive halving: screen with few steps, re-measure the best with `trial.steps`."""

    screening_steps: int = Field(gt=0, description="timed steps of a screening trial")
    keep_fraction: float = Field(default=0.25, gt=0, le=1, description="share re-measured")
    min_screened: int = Field(default=4, gt=0, description="screened trials before promoting")


class SearchSpec(Strict):
    algorithm: Literal["grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided"] = (
        "grid"
    )
    seed: int = 0
    # cost-guided: stop once no candidate's upper bound is within this of the best measured.
    stop_margin: float = Field(default=0.0, ge=0, lt=1)
    fidelity: FidelitySpec | None = None
    # Seed this campaign with another's results: its name under the same runs directory.
    warm_start: str | None = None


class BudgetSpec(Strict):
    max_trials: int = Field(default=8, gt=0, description="trials run on the backend")
    max_concurrent: int = Field(default=1, gt=0)
    wall_clock_s: float | None = Field(default=None, gt=0, description="stop submitting after")
    gpu_hours: float | None = Field(default=None, gt=0, description="world size x trial time")
    patience: int | None = Field(default=None, gt=0, description="trials without improvement")


class TrackingSpec(Strict):
    uri: str | None = Field(default=None, description="default: sqlite at <runs_dir>/mlflow.db")
    runs_dir: str = "runs"
    enabled: bool = True
    # While MLflow is unreachable, results stay in the journal; retry this often.
    retry_s: float = Field(default=30.0, gt=0)
