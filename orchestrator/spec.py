"""The campaign spec: one YAML file, validated by pydantic, with `--set a.b=value` overrides.

Every problem becomes one `SpecError` line naming the file, the key path, what was wrong and
what is allowed, so the CLI never shows a traceback for bad input.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.errors import SpecError
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS, Cluster, ModelShape

CheckpointMode = Literal["none", "selective", "full"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _resolve_preset(value: Any, presets: dict, kind: str) -> Any:
    """A preset name, or a mapping with an optional `preset:` base and overrides."""
    if isinstance(value, str):
        if value not in presets:
            raise ValueError(f"unknown {kind} preset {value!r}; choose one of {', '.join(presets)}")
        return presets[value]
    if isinstance(value, dict) and "preset" in value:
        base = _resolve_preset(value["preset"], presets, kind)
        overrides = {k: v for k, v in value.items() if k != "preset"}
        return {**base.model_dump(), **overrides}
    return value


class ScaleSpec(_Strict):
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


class SpaceSpec(_Strict):
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


class ObjectiveSpec(_Strict):
    metric: Literal["tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu"] = (
        "tokens_per_s"
    )
    mode: Literal["max", "min"] = "max"


class FidelitySpec(_Strict):
    """Successive halving: screen with few steps, re-measure the best with `trial.steps`."""

    screening_steps: int = Field(gt=0, description="timed steps of a screening trial")
    keep_fraction: float = Field(default=0.25, gt=0, le=1, description="share re-measured")
    min_screened: int = Field(default=4, gt=0, description="screened trials before promoting")


class SearchSpec(_Strict):
    algorithm: Literal["grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided"] = (
        "grid"
    )
    seed: int = 0
    # cost-guided: stop once no candidate's upper bound is within this of the best measured.
    stop_margin: float = Field(default=0.0, ge=0, lt=1)
    fidelity: FidelitySpec | None = None
    # Seed this campaign with another's results: its name under the same runs directory.
    warm_start: str | None = None


class BudgetSpec(_Strict):
    max_trials: int = Field(default=8, gt=0, description="trials run on the backend")
    max_concurrent: int = Field(default=1, gt=0)
    wall_clock_s: float | None = Field(default=None, gt=0, description="stop submitting after")
    gpu_hours: float | None = Field(default=None, gt=0, description="world size x trial time")
    patience: int | None = Field(default=None, gt=0, description="trials without improvement")


class TrialSpec(_Strict):
    steps: int = Field(default=10, gt=0, description="timed steps after warm-up")
    warmup_steps: int = Field(default=2, ge=0)
    timeout_s: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    # The trainer keeps no s x s attention scores (FlashAttention, SDPA): the cost model drops them.
    flash_attention: bool = True
    # An external trainer instead of the built-in one: an argv list (never run through a
    # shell) whose items may hold {placeholders}; see orchestrator/launch.py.
    command: list[str] | None = None
    workdir: str | None = Field(default=None, description="where command runs; default: cwd")

    @field_validator("command")
    @classmethod
    def _known_placeholders(cls, command: list[str] | None) -> list[str] | None:
        from orchestrator.launch import PLACEHOLDERS, placeholders_in

        if command is not None:
            if not command:
                raise ValueError("command must not be empty; give the program and its arguments")
            unknown = sorted({name for item in command for name in placeholders_in(item)}
                             - set(PLACEHOLDERS))
            if unknown:
                raise ValueError(
                    f"unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
                    f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
        return command

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, env: Any) -> Any:
        if isinstance(env, dict):  # YAML reads `OMP_NUM_THREADS: 4` as an int
            return {k: v if isinstance(v, str) else str(v) for k, v in env.items()}
        return env


class BackendSpec(_Strict):
    kind: Literal["local", "simulated", "ray", "slurm"] = "local"
    # ray: a running cluster (`auto`, `ray://host:10001`), or none to start a local runtime.
    address: str | None = None
    num_cpus: int | None = Field(default=None, gt=0, description="local Ray runtime's CPUs")
    gpus_per_rank: float = Field(default=0.0, ge=0, description="GPUs a trial rank asks of Ray")
    # slurm: one job per trial through submitit.
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = Field(default=60, gt=0)
    constraint: str | None = None
    cpus_per_task: int | None = Field(default=None, gt=0)
    setup: list[str] = Field(default_factory=list, description="shell lines run before the trial")
    sbatch_args: dict[str, str] = Field(default_factory=dict, description="more #SBATCH options")
    array_parallelism: int = Field(default=8, gt=0)
    max_requeues: int = Field(default=2, ge=0, description="after NODE_FAIL or PREEMPTED")
    # simulated only: the cost model's answer times seeded noise, with optional hidden
    # per-knob perturbations so the ground truth differs from the searchers' model.
    noise: float = Field(default=0.03, ge=0, le=1, description="relative std of throughput")
    failure_rate: float = Field(default=0.0, ge=0, le=1, description="crash, hang or oom")
    perturbation: float = Field(default=0.0, ge=0, le=1, description="per-knob factor spread")
    seed: int = 0
    latency_s: float = Field(default=0.0, ge=0, description="wall time a simulated trial takes")


class TrackingSpec(_Strict):
    uri: str | None = Field(default=None, description="default: sqlite at <runs_dir>/mlflow.db")
    runs_dir: str = "runs"
    enabled: bool = True
    # While MLflow is unreachable, results stay in the journal; retry this often.
    retry_s: float = Field(default=30.0, gt=0)


class CampaignSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    model: ModelShape
    cluster: Cluster
    scale: ScaleSpec
    space: SpaceSpec = Field(default_factory=SpaceSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    trial: TrialSpec = Field(default_factory=TrialSpec)
    backend: BackendSpec = Field(default_factory=BackendSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)

    @field_validator("model", mode="before")
    @classmethod
    def _model_preset(cls, value: Any) -> Any:
        return _resolve_preset(value, MODEL_PRESETS, "model")

    @field_validator("cluster", mode="before")
    @classmethod
    def _cluster_preset(cls, value: Any) -> Any:
        return _resolve_preset(value, CLUSTER_PRESETS, "cluster")

    @model_validator(mode="after")
    def _space_fits_model(self) -> "CampaignSpec":
        _check_divisors("space.tp", "tp", self.space.tp, "model.num_heads", self.model.num_heads)
        _check_divisors("space.pp", "pp", self.space.pp, "model.num_layers", self.model.num_layers)
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.scale.gpus_per_node or self.cluster.gpus_per_node

    @property
    def world_size(self) -> int:
        return self.scale.nodes * self.gpus_per_node

    def runs_dir(self) -> Path:
        return Path(os.environ.get("PARATUNE_RUNS_DIR") or self.tracking.runs_dir)

    def campaign_dir(self) -> Path:
        return self.runs_dir() / self.name

    def tracking_uri(self) -> str:
        if self.tracking.uri:
            return self.tracking.uri
        if os.environ.get("MLFLOW_TRACKING_URI"):
            return os.environ["MLFLOW_TRACKING_URI"]
        return f"sqlite:///{(self.runs_dir() / 'mlflow.db').resolve()}"


def _check_divisors(key: str, name: str, values: list[int], of: str, total: int) -> None:
    for value in values:
        if total % value:
            divisors = [d for d in range(1, total + 1) if total % d == 0]
            shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            # Cross-field errors carry their key path in front; _describe keeps it.
            raise ValueError(f"{key}: {name}={value} does not divide {of}={total}; use one of {shown}")


# ---------------------------------------------------------------------------------------------
# Loading

SPEC_FILE = "spec.yaml"  # a campaign's resolved spec, saved in its directory


def load_campaign_spec(runs_dir: Path, name: str) -> CampaignSpec:
    """The spec a campaign was started with, as saved in its directory."""
    from orchestrator.errors import CampaignStateError

    path = Path(runs_dir) / name / SPEC_FILE
    if not path.exists():
        raise CampaignStateError(
            f"no campaign {name!r} under {runs_dir}/ (missing {path}); start it with "
            "`paratune run SPEC.yaml`, or pass --runs-dir"
        )
    data = yaml.safe_load(path.read_text())
    data.setdefault("tracking", {})["runs_dir"] = str(runs_dir)
    return spec_from_dict(data, source=str(path))



def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> CampaignSpec:
    """Read, override and validate a campaign spec; every failure is one SpecError line."""
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{path}: file not found; pass the path of a campaign YAML file")
    if path.is_dir():
        raise SpecError(f"{path}: is a directory; pass the path of a campaign YAML file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}:{where}: YAML syntax error: {problem}; fix the YAML") from None
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: expected a mapping of keys (name, model, cluster, ...), "
            f"got {type(data).__name__}"
        )
    for item in overrides:
        apply_override(data, item, source=str(path))
    return spec_from_dict(data, source=str(path))


def spec_from_dict(data: dict[str, Any], source: str = "<spec>") -> CampaignSpec:
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_describe(exc, source)) from None


def apply_override(data: dict[str, Any], item: str, source: str = "<spec>") -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a raw spec mapping, in place."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. budget.max_trials=4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    parts = key.strip().split(".")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, str) and part in ("model", "cluster") and depth == 0:
            child = {"preset": child}  # override one field of a preset
        elif child is None:
            child = {}
        elif not isinstance(child, dict):
            path = ".".join(parts[: depth + 1])
            raise SpecError(f"{source}: --set {key}: {path} is not a mapping; set {path} itself")
        node[part] = child
        node = child
    node[parts[-1]] = value


def _describe(exc: ValidationError, source: str) -> str:
    """The first validation error as one line: file, key path, problem, allowed values."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    msg = err["msg"].removeprefix("Value error, ")
    if not loc:  # a cross-field check, whose message starts with its key path
        return f"{source}: {msg}"
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        return f"{source}: {key}: unknown key{hint}"
    if err["type"] == "missing":
        return f"{source}: {key}: required key is missing; add it"
    if "input" in err and err["type"] not in ("value_error",):
        msg = f"{msg} (got {err['input']!r})"
    return f"{source}: {key}: {msg}"


def _allowed_keys(loc: list[str]) -> list[str]:
    model: Any = CampaignSpec
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
    return list(getattr(model, "model_fields", {}))
