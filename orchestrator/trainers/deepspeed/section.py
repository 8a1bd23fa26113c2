"""The spec's `trial.deepspeed`: the user's DeepSpeed script and base config."""

from __future__ import annotations

from pydantic import Field, field_validator

from orchestrator.common.placeholders import check_placeholders
from orchestrator.trainers.section import TrainerSection


class DeepSpeedSection(TrainerSection):
    """A user's DeepSpeed training script, launched by torchrun with a DeepSpeed config that
    ParaTune writes per layout (batch split, ZeRO stage) over the user's base config."""

    trial_key = "deepspeed"

    script: str = Field(description="the training script (path), run by torchrun")
    args: list[str] = Field(default_factory=list, description="its arguments; {placeholders}")
    config: str | None = Field(default=None, description="base ds_config JSON (path)")
    config_arg: str = Field(default="--deepspeed_config", description="flag that takes the config")

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: list[str]) -> list[str]:
        return check_placeholders(args)

    def input_files(self) -> list[str]:
        return [name for name in (self.script, self.config) if name]


SECTION = DeepSpeedSection
