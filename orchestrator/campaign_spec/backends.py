"""The spec's `backend:` section: one model per backend kind, chosen by `kind` (default local).

A key of another kind is an error in a user's spec; `for_saved_spec` drops such keys from a
spec saved by the 0.1 layout, which wrote every kind's keys into one flat section.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from orchestrator.campaign_spec.sections import MAX_COUNT, MAX_SEED, Strict, is_saved
from orchestrator.campaign_spec.strings import SBATCH_OPTION, check_sbatch_value


class LocalBackendSpec(Strict):
    """Trials run as local processes (torchrun on this machine)."""

    kind: Literal["local"] = "local"


class SimulatedBackendSpec(Strict):
    """The cost model's answer times seeded noise, with optional hidden per-knob
    perturbations so the ground truth differs from the searchers' model."""

    kind: Literal["simulated"] = "simulated"
    noise: float = Field(default=0.03, ge=0, le=1, description="relative std of throughput")
    failure_rate: float = Field(default=0.0, ge=0, le=1, description="crash, hang or oom")
    perturbation: float = Field(default=0.0, ge=0, le=1, description="per-knob factor spread")
    interactions: float = Field(default=0.0, ge=0, le=2,
                                description="strength of quirks that depend on several knobs")
    parallel_quirks: float = Field(
        default=0.0, ge=0, le=2,
        description="strength of quirks of ep, cp, its exchange and interleaving")
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    latency_s: float = Field(default=0.0, ge=0, le=1e6, description="wall time a simulated trial takes")


class RayBackendSpec(Strict):
    """Trials as Ray tasks."""

    kind: Literal["ray"] = "ray"
    # A running cluster (`auto`, `ray://host:10001`), or none to start a local runtime.
    address: str | None = None
    num_cpus: int | None = Field(default=None, gt=0, le=MAX_COUNT, description="local Ray runtime's CPUs")
    gpus_per_rank: float = Field(default=0.0, ge=0, le=1024, description="GPUs a trial rank asks of Ray")

    @model_validator(mode="after")
    def _cpus_need_local_runtime(self, info: ValidationInfo) -> "RayBackendSpec":
        """num_cpus sizes the Ray runtime ParaTune starts itself; a running cluster at
        `address` has its own size, so there it would be accepted and never used."""
        if self.address and self.num_cpus is not None and not is_saved(info):
            raise ValueError("backend.num_cpus: it sizes only the local Ray runtime ParaTune "
                             "starts, and backend.address names a running cluster; "
                             "remove num_cpus (size the cluster with `ray start --num-cpus`), "
                             "or remove address")
        return self


class SlurmBackendSpec(Strict):
    """One Slurm job per trial through submitit."""

    kind: Literal["slurm"] = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = Field(default=60, gt=0, le=MAX_COUNT)
    constraint: str | None = None
    cpus_per_task: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    setup: list[str] = Field(default_factory=list, description="shell lines run before the trial")
    sbatch_args: dict[str, str] = Field(default_factory=dict, description="more #SBATCH options")
    array_parallelism: int = Field(default=8, gt=0, le=MAX_COUNT)
    max_requeues: int = Field(default=2, ge=0, le=1000, description="after NODE_FAIL or PREEMPTED")

    @field_validator("partition", "account", "qos", "constraint")
    @classmethod
    def _one_word(cls, value: str | None, info: Any) -> str | None:
        return value if value is None else check_sbatch_value(info.field_name, value)

    @field_validator("sbatch_args")
    @classmethod
    def _sbatch_options(cls, args: dict[str, str]) -> dict[str, str]:
        for key, value in args.items():
            if not SBATCH_OPTION.fullmatch(key):
                raise ValueError(f"{key!r} is not a long sbatch option name (e.g. mem-per-cpu)")
            check_sbatch_value(key, value)
        return args


BACKEND_MODELS: dict[str, type[Strict]] = {
    "local": LocalBackendSpec, "simulated": SimulatedBackendSpec,
    "ray": RayBackendSpec, "slurm": SlurmBackendSpec,
}
DEFAULT_KIND = "local"


def _fill_kind(section: Any) -> Any:
    """`backend: {}` (or a section without `kind`) means the local backend."""
    if isinstance(section, dict) and "kind" not in section:
        return {**section, "kind": DEFAULT_KIND}
    return section


BackendSpec = Annotated[
    Union[LocalBackendSpec, SimulatedBackendSpec, RayBackendSpec, SlurmBackendSpec],
    Field(discriminator="kind"),
    BeforeValidator(_fill_kind),
]


def for_saved_spec(section: Any) -> Any:
    """A saved backend section without the keys of other kinds (the 0.1 layout saved them all).

    Keys that belong to no kind stay, so a damaged file still fails validation.
    """
    if not isinstance(section, dict):
        return section
    own = BACKEND_MODELS.get(section.get("kind", DEFAULT_KIND))
    if own is None:
        return section
    any_kind = {key for model in BACKEND_MODELS.values() for key in model.model_fields}
    return {k: v for k, v in section.items() if k in own.model_fields or k not in any_kind}
