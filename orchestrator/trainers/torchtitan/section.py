"""The spec's `trial.torchtitan`: which torchtitan model and config a trial starts from."""

from __future__ import annotations

from pydantic import Field, field_validator

from orchestrator.common.placeholders import check_placeholders
from orchestrator.trainers.section import TrainerSection


class TorchtitanSection(TrainerSection):
    """torchtitan's own model family and config, with the user's overrides; ParaTune adds the
    layout's parallelism, batch and checkpointing overrides after them (so the layout wins)."""

    trial_key = "torchtitan"

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


SECTION = TorchtitanSection
