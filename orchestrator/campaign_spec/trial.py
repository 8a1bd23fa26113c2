"""The spec's `trial` section: how long a trial runs, and which trainer it runs, with that
trainer's base config (the user's own script, config or arguments that ParaTune fills per layout).

`trial.trainer` is a name the trainer registry holds (orchestrator/trainers/registry.py); it
defaults to the command trainer when `trial.command` is given, else to the registry's default.
A trainer that reads a section of its own declares it in its folder (its section.py, a
`TrainerSection`), and `TrialSpec` is built from every registered folder's section; a section of
another trainer is an error. A command's code is not seen, so `trial.runtime` tells the cost
model which engine it runs; every other trainer's runtime is its own.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_validator

from orchestrator.common.errors import excerpt
from orchestrator.common.placeholders import check_placeholders
from orchestrator.campaign_spec.sections import MAX_COUNT, Strict
from orchestrator.campaign_spec.strings import check_env_name
from orchestrator.trainers.registry import sections

# The result fields a user's regex may read from a `command` trainer's log.
LOG_METRICS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
               "mfu_percent", "loss", "peak_memory_gb")
# Names bash holds read-only (`readonly -p`): a launch script that exports one stops there.
BASH_READONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})
# Names the shell itself acts on: a startup file a non-interactive bash (`srun bash -c` in an
# sbatch export) or an interactive sh runs, prompts and tracing it expands, word splitting,
# `cd`'s search path, globbing, command lookup, compatibility and POSIX modes. A launch script
# that exported one would run differently, or run the value; so would names of the form
# BASH_FUNC_*, which bash reads as functions.
SHELL_ENV = frozenset({"BASH_ENV", "ENV", "PROMPT_COMMAND", "PS4", "BASH_XTRACEFD", "IFS",
                       "CDPATH", "GLOBIGNORE", "EXECIGNORE", "BASH_COMPAT", "POSIXLY_CORRECT"})
SHELL_FUNCTION_PREFIX = "BASH_FUNC_"


def is_shell_variable(name: str) -> bool:
    return name in SHELL_ENV or name.startswith(SHELL_FUNCTION_PREFIX)


class _TrialFields(Strict):
    """The keys every trainer shares; TrialSpec adds each registered trainer's own section."""

    steps: int = Field(default=10, gt=0, le=MAX_COUNT, description="timed steps after warm-up")
    warmup_steps: int = Field(default=2, ge=0, le=MAX_COUNT)
    timeout_s: float = Field(default=600.0, gt=0, le=1e8)
    env: dict[str, str] = Field(default_factory=dict)
    # A cost-model assumption: the trainer keeps no s x s attention scores (FlashAttention,
    # SDPA's fused kernels), so the memory model drops them. The Megatron trainers also pick
    # their attention kernel by it; the others choose their own (campaign_spec/notices.py warns).
    flash_attention: bool = True
    trainer: str | None = Field(default=None, description="a registered trainer; default: builtin")
    # trainer `command`: an argv list (never run through a shell) whose items may hold
    # {placeholders}; it starts its own ranks.
    command: list[str] | None = None
    # trainer `command`: result field -> regex whose first group is its value on a log line.
    log_metrics: dict[Literal[LOG_METRICS], str] = Field(default_factory=dict)
    # trainer `command`: the engine the cost model prices the program as (zero_engine.py).
    runtime: str | None = Field(
        default=None, description="default: DeepSpeed's ZeRO, PyTorch's DDP at stage 0")
    workdir: str | None = Field(default=None, description="where the trainer runs; default: cwd")

    @field_validator("trainer")
    @classmethod
    def _registered(cls, trainer: str | None) -> str | None:
        from orchestrator.trainers.registry import names

        if trainer is not None and trainer not in names():
            raise ValueError(f"unknown trainer {excerpt(trainer, 40)}; choose one of "
                             f"{', '.join(names())}")
        return trainer

    @field_validator("runtime")
    @classmethod
    def _a_runtime(cls, runtime: str | None) -> str | None:
        from orchestrator.trainers.registry import runtimes

        if runtime is not None and runtime not in runtimes():
            raise ValueError(f"unknown runtime {excerpt(runtime, 40)}; choose one of "
                             f"{', '.join(runtimes())}")
        return runtime

    @field_validator("command")
    @classmethod
    def _known_placeholders(cls, command: list[str] | None) -> list[str] | None:
        if command is not None:
            if not command:
                raise ValueError("command must not be empty; give the program and its arguments")
            check_placeholders(command)
        return command

    @field_validator("log_metrics")
    @classmethod
    def _one_group(cls, patterns: dict[str, str]) -> dict[str, str]:
        import re

        for name, pattern in patterns.items():
            try:
                groups = re.compile(pattern).groups
            except re.error as exc:
                raise ValueError(f"{name}: not a regular expression ({exc})") from None
            if groups < 1:
                raise ValueError(f"{name}: the regex needs a group around the value, e.g. "
                                 r"'tps: ([0-9.]+)'")
        return patterns

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, env: Any) -> Any:
        if not isinstance(env, dict):
            return env
        text = {}
        for key, value in env.items():  # YAML reads `OMP_NUM_THREADS: 4` as an int
            if not isinstance(key, str):
                raise ValueError(f"{excerpt(key, 40)}: a variable name is text")
            check_env_name(key)
            if key in BASH_READONLY:
                raise ValueError(f"trial.env.{key}: bash holds {key} read-only, so an exported "
                                 "launch script would stop at it; drop it or rename it")
            if is_shell_variable(key):
                raise ValueError(f"trial.env.{key}: the shell acts on {key} itself, so an "
                                 "exported launch script would run differently or run its "
                                 "value; drop it or rename it")
            if isinstance(value, (list, dict)) or value is None:
                raise ValueError(f"{key}: give a string, number or true/false, not "
                                 f"{excerpt(value, 40)}")
            text[key] = value if isinstance(value, str) else str(value)
        return text

    @model_validator(mode="after")
    def _trainer_and_its_section(self) -> "_TrialFields":
        """Each trainer's own keys (its section; a command's program, regexes and runtime)
        go with that trainer only, as the registry says which trainer reads which."""
        from orchestrator.trainers.registry import DEFAULT, readers_of

        command = readers_of("command")[0]
        if self.trainer is None:
            self.trainer = command if self.command is not None else DEFAULT
        if (self.trainer == command) != (self.command is not None):
            raise ValueError("trial.command: give a command exactly when trial.trainer is "
                             f"{command!r} (trainer is {self.trainer!r})")
        if self.log_metrics and self.trainer not in readers_of("log_metrics"):
            raise ValueError(f"trial.log_metrics: only the {command} trainer reads user regexes; "
                             f"{self.trainer} has its own log parser")
        if self.runtime is not None and self.trainer not in readers_of("runtime"):
            raise ValueError("trial.runtime: only a trial.command program takes a runtime; "
                             f"the {self.trainer} trainer's is its own (drop trial.runtime)")
        sections = [key for key, field in type(self).model_fields.items()
                    if _section_of(field.annotation)]
        for section in sections:
            given, own = getattr(self, section) is not None, self.trainer in readers_of(section)
            if given and not own:
                raise ValueError(f"trial.{section}: a section for another trainer; trial.trainer "
                                 f"is {self.trainer!r} (set trial.trainer, or drop trial.{section})")
            if not given and own:
                model = _section_of(type(self).model_fields[section].annotation)
                required = [k for k, f in model.model_fields.items() if f.is_required()]
                if required:
                    raise ValueError(f"trial.{section}: required with trainer {self.trainer}; "
                                     f"give at least `{required[0]}: ...`")
                setattr(self, section, model())
        return self


def _section_of(annotation) -> type[Strict] | None:
    """The section model of a `trial` field typed `Section | None`, else None."""
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, Strict):
            return arg
    return None


TrialSpec = create_model(
    "TrialSpec", __base__=_TrialFields, __module__=__name__,
    __doc__="The spec's `trial`: the shared keys, then each registered trainer's own section.",
    **{key: (section | None, None) for key, section in sections().items()})


def campaign_inputs(trial: TrialSpec) -> tuple[Path, ...]:
    """The files a campaign's trials read (base DeepSpeed configs, training scripts), resolved
    against its working folder: an export must never be written over one of them."""
    named = [name for key in sections() if getattr(trial, key, None) is not None
             for name in getattr(trial, key).input_files()]
    root = Path(trial.workdir or ".")
    return tuple(root / name for name in named if name)
