"""The spec's `trial.megatron_bridge`: which Megatron-Bridge recipe a trial runs, through which
script, on which data, with the user's own ConfigContainer overrides.

The script is Megatron-Bridge's `scripts/training/run_recipe.py` (v0.6.0; it lives in the
repository, not in the wheel): `--recipe NAME` picks a recipe function, `--dataset mock` its
mock data, and trailing KEY=VALUE words are Hydra overrides of the ConfigContainer
(`_collect_overrides`: a word starting with "-" or without "=" is refused). ParaTune's own
overrides (overrides.py) come after the user's, and the keys a layout owns are refused here, so
no user override is silently outvoted.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from orchestrator.common.placeholders import check_placeholders
from orchestrator.trainers.megatron_bridge.overrides import LAYOUT_KEYS
from orchestrator.trainers.section import TrainerSection

# Hydra's override key: an optional + (add), ++ (force add) or ~ (delete), then a dotted path.
OVERRIDE = re.compile(r"(?P<key>(?:\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)=.*",
                      re.S)


def check_overrides(overrides: list[str]) -> list[str]:
    """The user's overrides, each KEY=VALUE on a key no layout owns; else a one-line error."""
    for item in overrides:
        match = OVERRIDE.fullmatch(item)
        if not match:
            raise ValueError(f"{item[:80]!r}: give KEY=VALUE (a ConfigContainer field, e.g. "
                             "optimizer.lr=1e-4), as run_recipe.py takes them")
        key = match["key"].lstrip("+~")
        if key in LAYOUT_KEYS:
            raise ValueError(f"{key}: ParaTune sets it from {LAYOUT_KEYS[key]}; drop it from "
                             "trial.megatron_bridge.overrides")
    return overrides


class MegatronBridgeSection(TrainerSection):
    """A Megatron-Bridge recipe run by its run_recipe.py; ParaTune adds the model shape and the
    layout as overrides after the user's (overrides.py)."""

    trial_key = "megatron_bridge"

    script: str = Field(default="scripts/training/run_recipe.py",
                        description="run_recipe.py (path)")
    recipe: str = Field(default="llama3_8b_pretrain_config", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    dataset: str = Field(default="mock", pattern=r"^[A-Za-z0-9_.-]+$")
    overrides: list[str] = Field(default_factory=list, description="KEY=VALUE; {placeholders}")

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, overrides: list[str]) -> list[str]:
        return check_placeholders(check_overrides(overrides))


SECTION = MegatronBridgeSection
