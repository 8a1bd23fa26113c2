"""The {placeholders} a trainer's argument templates may hold (`trial.command`, the deepspeed,
torchtitan and megatron sections), and how to find them.

A leaf that both the spec (to validate templates) and the trainer adapters (to fill them) import.
`steps` is the timed steps; `total_steps` adds `warmup_steps`, for trainers told how many
steps to run in all. Every layout knob is one, so `{ep}` and `{etp}` give a script the expert
layout it builds its mixture-of-experts layers with (DeepSpeed's MoE takes ep_size);
`stage_layers` is the transformer layers of each pipeline stage, comma-separated, as the
layout's pipeline_split places them.
"""

from __future__ import annotations

import re

from orchestrator.layout import SHARDING_FACTORS, knobs

PLACEHOLDER_PATTERN = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
CONFIG_FIELDS = tuple(k.name for k in knobs()) + SHARDING_FACTORS
PLACEHOLDERS = tuple(dict.fromkeys(CONFIG_FIELDS + (
    "world_size", "nodes", "gpus_per_node", "global_batch_size", "seq_len", "steps",
    "warmup_steps", "total_steps", "trial_id", "trial_dir", "deepspeed_config", "stage_layers",
)))


def placeholders_in(item: str) -> list[str]:
    """The names of the {placeholders} in one command item, in order."""
    return PLACEHOLDER_PATTERN.findall(item)


def check_placeholders(items: list[str]) -> list[str]:
    """`items` (argument templates) as given, or a ValueError naming each unknown placeholder
    and the ones allowed: the spec's validators (a trainer's section, a command) call it."""
    unknown = sorted({name for item in items for name in placeholders_in(item)} - set(PLACEHOLDERS))
    if unknown:
        raise ValueError(
            f"unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
        )
    return items
