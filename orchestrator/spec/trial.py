"""The spec's `trial` section: how long a trial runs, and which trainer it runs, with that
trainer's base config (the user's own script, config or arguments that ParaTune fills per layout).

`trial.trainer` is a name the trainer registry holds (orchestrator/trainers/registry.py: builtin,
deepspeed, torchtitan, megatron-lm, megatron-deepspeed, command and any trainer registered);
it defaults to command when `trial.command` is given, else builtin. Each trainer but the
built-in one reads its own section (`trial.deepspeed`, `trial.torchtitan`, `trial.megatron`); a
section of another trainer is an error. A command's code is not seen, so `trial.runtime` tells
the cost model which engine it runs; every other trainer's runtime is its own.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.common.errors import excerpt
from orchestrator.common.placeholders import PLACEHOLDERS, placeholders_in
from orchestrator.spec.sections import MAX_COUNT, Strict
from orchestrator.spec.strings import check_env_name

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


def check_placeholders(items: list[str]) -> list[str]:
    unknown = sorted({name for item in items for name in placeholders_in(item)} - set(PLACEHOLDERS))
    if unknown:
        raise ValueError(
            f"unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
        )
    return items


class DeepSpeedTrainerSpec(Strict):
    """A user's DeepSpeed training script, launched by torchrun with a DeepSpeed config that
    ParaTune writes per layout (batch split, ZeRO stage) over the user's base config."""

    script: str = Field(description="the training script (path), run by torchrun")
    args: list[str] = Field(default_factory=list, description="its arguments; {placeholders}")
    config: str | None = Field(default=None, description="base ds_config JSON (path)")
    config_arg: str = Field(default="--deepspeed_config", description="flag that takes the config")

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: list[str]) -> list[str]:
        return check_placeholders(args)


class TorchtitanTrainerSpec(Strict):
    """torchtitan's own model family and config, with the user's overrides; ParaTune adds the
    layout's parallelism, batch and checkpointing overrides after them (so the layout wins)."""

    module: str = Field(default="llama3", description="torchtitan --module")
    config: str = Field(default="llama3_debugmodel", description="torchtitan --config")
    entry: str = Field(default="torchtitan.train", description="the module torchrun runs (-m)")
    overrides: list[str] = Field(default_factory=list, description="more flags; {placeholders}")

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, overrides: list[str]) -> list[str]:
        for item in overrides:
            if item in ("--module", "--config") or item.startswith(
                    ("activation-checkpoint:", "--module=", "--config=")):
                raise ValueError(
                    f"{item!r}: ParaTune sets activation checkpointing from the layout and "
                    "--module/--config from trial.torchtitan.module and .config; drop it")
        return check_placeholders(overrides)


class MegatronTrainerSpec(Strict):
    """Megatron-LM's or Megatron-DeepSpeed's pretraining script with the user's base arguments
    (data, tokenizer, optimizer); ParaTune adds the model shape and the layout's flags."""

    script: str = Field(default="pretrain_gpt.py", description="the pretraining script (path)")
    args: list[str] = Field(default_factory=list, description="base arguments; {placeholders}")
    deepspeed_config: str | None = Field(default=None, description="base ds_config (megatron-deepspeed)")

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: list[str]) -> list[str]:
        return check_placeholders(args)


class MegatronBridgeTrainerSpec(Strict):
    """A Megatron-Bridge recipe run by its run_recipe.py; ParaTune adds the model shape and the
    layout as overrides after the user's (orchestrator/trainers/megatron_bridge/section.py)."""

    script: str = Field(default="scripts/training/run_recipe.py", description="run_recipe.py (path)")
    recipe: str = Field(default="llama3_8b_pretrain_config", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    dataset: str = Field(default="mock", pattern=r"^[A-Za-z0-9_.-]+$")
    overrides: list[str] = Field(default_factory=list, description="KEY=VALUE; {placeholders}")

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, overrides: list[str]) -> list[str]:
        from orchestrator.trainers.megatron_bridge.section import check_overrides  # imports spec

        return check_placeholders(check_overrides(overrides))


class TrialSpec(Strict):
    steps: int = Field(default=10, gt=0, le=MAX_COUNT, description="timed steps after warm-up")
    warmup_steps: int = Field(default=2, ge=0, le=MAX_COUNT)
    timeout_s: float = Field(default=600.0, gt=0, le=1e8)
    env: dict[str, str] = Field(default_factory=dict)
    # A cost-model assumption: the trainer keeps no s x s attention scores (FlashAttention,
    # SDPA's fused kernels), so the memory model drops them. The Megatron trainers also pick
    # their attention kernel by it; the others choose their own (spec/notices.py warns).
    flash_attention: bool = True
    trainer: str | None = Field(default=None, description="a registered trainer; default: builtin")
    deepspeed: DeepSpeedTrainerSpec | None = None
    torchtitan: TorchtitanTrainerSpec | None = None
    megatron: MegatronTrainerSpec | None = None
    megatron_bridge: MegatronBridgeTrainerSpec | None = None
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
    def _trainer_and_its_section(self) -> "TrialSpec":
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


def campaign_inputs(trial: TrialSpec) -> tuple[Path, ...]:
    """The files a campaign's trials read (base DeepSpeed configs, training scripts), resolved
    against its working folder: an export must never be written over one of them."""
    named = []
    if trial.deepspeed is not None:
        named += [trial.deepspeed.script, trial.deepspeed.config]
    if trial.megatron is not None:
        named += [trial.megatron.script, trial.megatron.deepspeed_config]
    root = Path(trial.workdir or ".")
    return tuple(root / name for name in named if name)
