"""`CampaignSpec`: a whole campaign as one validated model, with model and cluster presets
resolved and the checks that span sections (tp divides heads, pp divides layers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from orchestrator.common.errors import SpecError, excerpt
from orchestrator.common.paths import default_tracking_uri, runs_root
from orchestrator.layout import PIPELINE_SPLITS
from orchestrator.pipeline_split import split_problem
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS, Cluster, ModelShape
from orchestrator.space import InvalidConfig, Layout, SearchSpace
from orchestrator.campaign_spec.backends import BackendSpec, LocalBackendSpec
from orchestrator.campaign_spec.command_knobs import pin_unused_knobs
from orchestrator.campaign_spec.feasibility import explain_empty
from orchestrator.campaign_spec.notices import check_flash_attention
from orchestrator.campaign_spec.sections import (
    BudgetSpec,
    ObjectiveSpec,
    ScaleSpec,
    SearchSpec,
    Strict,
    TrackingSpec,
    is_saved,
)
from orchestrator.campaign_spec.space_section import SpaceSpec
from orchestrator.campaign_spec.strings import NAME_MAX, NAME_PATTERN
from orchestrator.campaign_spec.trainer_layouts import check_listed, check_trainer_space, runnable
from orchestrator.campaign_spec.trial import TrialSpec
from orchestrator.campaign_spec.yaml_input import load_yaml_file


def _resolve_preset(value: Any, presets: dict, kind: str) -> Any:
    """A preset name, a preset file (`paratune profile` writes one), or a mapping with an
    optional `preset:` base and overrides."""
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        return _preset_file(value, kind)
    if isinstance(value, str):
        if value not in presets:
            raise ValueError(f"unknown {kind} preset {excerpt(value, 60)}; choose one of "
                             f"{', '.join(presets)}")
        return presets[value]
    if isinstance(value, dict) and "preset" in value:
        if not isinstance(value["preset"], str):
            raise ValueError(f"preset: give a {kind} preset's name, one of {', '.join(presets)}")
        base = _resolve_preset(value["preset"], presets, kind)
        overrides = {k: v for k, v in value.items() if k != "preset"}
        fields = base if isinstance(base, dict) else base.model_dump()  # a file, or a preset
        return {**fields, **overrides}
    return value


def _preset_file(value: str, kind: str) -> Any:
    """A preset YAML file, relative to the working directory."""
    try:  # bounded as a spec is: size, encoding, structure
        data = load_yaml_file(Path(value).expanduser())
    except SpecError as exc:
        raise ValueError(f"{kind} preset file {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{kind} preset file {excerpt(value, 100)}: expected a mapping")
    return data


class CampaignSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_MAX)
    model: ModelShape
    cluster: Cluster
    scale: ScaleSpec
    space: SpaceSpec = Field(default_factory=SpaceSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    trial: TrialSpec = Field(default_factory=TrialSpec)
    backend: BackendSpec = Field(default_factory=LocalBackendSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    # False for a plan that names no trainer (`spec_from_dict(..., trainer_rules=False)`): it
    # prices layouts, so no trainer's refusals narrow them.
    _trainer_rules: bool = PrivateAttr(default=True)

    @field_validator("model", mode="before")
    @classmethod
    def _model_preset(cls, value: Any) -> Any:
        return _resolve_preset(value, MODEL_PRESETS, "model")

    @field_validator("cluster", mode="before")
    @classmethod
    def resolve_cluster(cls, value: Any) -> Any:
        """A preset name or file, or a mapping on a `preset:` base, as the cluster's fields."""
        return _resolve_preset(value, CLUSTER_PRESETS, "cluster")

    @model_validator(mode="after")
    def _space_fits_model(self, info: ValidationInfo) -> "CampaignSpec":
        """Every problem of the space against the model and the trainer, one line each in
        one error, so a spec is not fixed one run at a time."""
        self._trainer_rules = (info.context or {}).get("trainer_rules", True)
        checks = [
            lambda: _check_divisors("space.tp", "tp", self.space.tp, "model.num_heads",
                                    self.model.num_heads),
            lambda: _check_pipeline_depths(self.space, self.model.num_layers),
        ]
        if self._trainer_rules:
            checks.append(lambda: check_trainer_space(self))
        problems = []
        for check in checks:
            try:
                check()
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def trainer_rules(self) -> bool:
        """Whether the trainer's refusals narrow the layouts (False: a plan names none)."""
        return self._trainer_rules

    @model_validator(mode="after")
    def _listed_layouts_fit(self) -> "CampaignSpec":
        """Each `space.configs` entry fits the world, the model and the batch, checked as the
        spec is read so the error names its file."""
        if self.space.kind == "list":
            try:
                listed = self.search_space().candidates()
            except InvalidConfig as exc:  # the message names the entry's index
                raise ValueError(f"space.{exc}") from None
            check_listed(self, listed)
        return self

    @model_validator(mode="after")
    def _screening_is_shorter(self, info: ValidationInfo) -> "CampaignSpec":
        """A screen as long as a full measurement saves nothing (a saved campaign keeps the
        fidelity it ran with)."""
        fidelity = self.search.fidelity
        if (fidelity is not None and fidelity.screening_steps >= self.trial.steps
                and not is_saved(info)):
            raise ValueError(f"search.fidelity.screening_steps: {fidelity.screening_steps} is "
                             f"not fewer than trial.steps ({self.trial.steps}); a screening "
                             "trial measures fewer steps than a full one")
        return self

    @model_validator(mode="after")
    def _options_that_would_do_nothing(self, info: ValidationInfo) -> "CampaignSpec":
        """A command's knobs it never sees are pinned, and a cost-model assumption the trainer
        cannot follow is said, when a spec is new (a saved one keeps what it ran with)."""
        if not is_saved(info):
            if self.trial.command is not None:
                pin_unused_knobs(self.space, self.trial.command)
            check_flash_attention(self.trial.flash_attention, self.trial.trainer,
                                  self.backend.kind)
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.scale.gpus_per_node or self.cluster.gpus_per_node

    @property
    def world_size(self) -> int:
        return self.scale.nodes * self.gpus_per_node

    def search_space(self) -> SearchSpace:
        """The candidates' space: this spec's ranges on its model and scale."""
        return SearchSpace(
            ranges=self.space.ranges(),
            world_size=self.world_size,
            gpus_per_node=self.gpus_per_node,
            num_heads=self.model.num_heads,
            num_layers=self.model.num_layers,
            global_batch_size=self.scale.global_batch_size,
            num_experts=self.model.num_experts,
            seq_len=self.model.seq_len,
        )

    def candidates(self, fit: Callable[[Layout], Layout] | None = None,
                   ) -> list[Layout]:
        """The space's valid layouts; an empty space is a SpecError that says why. `fit`
        resolves `recompute_num_layers: fit` (costmodel.recompute); without it those layouts
        come with full recompute, enough to check the space."""
        space = self.search_space()
        try:
            found = space.candidates(fit=fit)
        except InvalidConfig as exc:  # a listed layout: the message names its index
            raise SpecError(f"space.{exc}") from None
        if not found:
            raise SpecError(f"{self.name}: the search space holds no valid layout: "
                            f"{explain_empty(space)}")
        return runnable(self, found)

    def runs_dir(self) -> Path:
        return runs_root(None, self.tracking.runs_dir)

    def campaign_dir(self) -> Path:
        return self.runs_dir() / self.name

    def tracking_uri(self) -> str:
        return self.tracking.uri or default_tracking_uri(self.runs_dir())


def _divisor_problem(key: str, name: str, value: int, of: str, total: int,
                     hint: str = "") -> str | None:
    if total % value == 0:
        return None
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
    # Cross-field errors carry their key path in front; _describe keeps it.
    return f"{key}: {name}={value} does not divide {of}={total}; use one of {shown}{hint}"


def _check_divisors(key: str, name: str, values: list[int], of: str, total: int) -> None:
    """A value that divides nothing is an error only where no other value of the range
    remains; otherwise it is a note (unused_values.py) and the others are searched."""
    problems = [p for v in values if (p := _divisor_problem(key, name, v, of, total))]
    if problems and len(problems) == len(set(values)):
        raise ValueError(problems[0])


def pipeline_depth_problem(splits: list[str], num_layers: int, pp: int) -> str | None:
    """Why no split the space lists puts `num_layers` on `pp` stages, naming the split that
    would, or None."""
    problems = [split_problem(num_layers, pp, 1, s) for s in splits]
    if None in problems:
        return None
    other = [s for s in PIPELINE_SPLITS if split_problem(num_layers, pp, 1, s) is None]
    hint = f", or set space.pipeline_split to [{other[0]}]" if other else ""
    if "even" in splits:  # the divisors are the even split's fix
        return _divisor_problem("space.pp", "pp", pp, "model.num_layers", num_layers, hint)
    return f"space.pp: pp={pp}: {problems[0]}{hint}"


def _check_pipeline_depths(space: SpaceSpec, num_layers: int) -> None:
    """Each pp of the space splits the layers one of the ways the space lists; one that does
    not is an error only where it is the only depth (else a note, unused_values.py)."""
    problems = [p for pp in space.pp
                if (p := pipeline_depth_problem(space.pipeline_split, num_layers, pp))]
    if problems and len(problems) == len(space.pp):
        raise ValueError(problems[0])
