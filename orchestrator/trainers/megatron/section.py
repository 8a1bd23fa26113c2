"""The spec's `trial.megatron`, which Megatron-LM and Megatron-DeepSpeed share: the
pretraining script and the user's base arguments."""

from __future__ import annotations

from pydantic import Field, field_validator

from orchestrator.common.placeholders import check_placeholders
from orchestrator.trainers.section import TrainerSection


class MegatronSection(TrainerSection):
    """Megatron-LM's or Megatron-DeepSpeed's pretraining script with the user's base arguments
    (data, tokenizer, optimizer); ParaTune adds the model shape and the layout's flags."""

    trial_key = "megatron"

    script: str = Field(default="pretrain_gpt.py", description="the pretraining script (path)")
    args: list[str] = Field(default_factory=list, description="base arguments; {placeholders}")
    deepspeed_config: str | None = Field(default=None,
                                         description="base ds_config (megatron-deepspeed)")

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: list[str]) -> list[str]:
        return check_placeholders(args)

    def input_files(self) -> list[str]:
        return [name for name in (self.script, self.deepspeed_config) if name]


SECTION = MegatronSection
