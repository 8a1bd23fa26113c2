"""Filling a trainer's argument templates: `{placeholder}` items get the trial's values (its
layout, scale, steps and files); each item stays one argument and never meets a shell.

`{etp}` is the expert tensor-parallel degree a script builds its experts with: the layout's
etp, or tp where etp is unset (Megatron-Core's default), never an empty word."""

from __future__ import annotations

from typing import Any

from orchestrator.common.placeholders import PLACEHOLDER_PATTERN
from orchestrator.layout import expert_tp


def placeholder_values(spec, layout, trial_id: str, folder, steps: int) -> dict[str, Any]:
    values: dict[str, Any] = dict(layout.to_params())
    values["etp"] = expert_tp(values)
    values.update({
        # The trial's own nodes: a slice campaign's search trials and a scaling study's runs
        # span fewer or more than the spec's scale.nodes.
        "world_size": layout.world_size, "nodes": -(-layout.world_size // spec.gpus_per_node),
        "gpus_per_node": spec.gpus_per_node, "global_batch_size": layout.global_batch_size(),
        "seq_len": spec.model.seq_len, "steps": steps, "warmup_steps": spec.trial.warmup_steps,
        "total_steps": steps + spec.trial.warmup_steps, "trial_id": trial_id,
        "trial_dir": str(folder.path), "deepspeed_config": str(folder.deepspeed_config),
        "stage_layers": ",".join(map(str, layout.stage_layers(spec.model.num_layers))),
    })
    return values


def fill(items: list[str], values: dict[str, Any]) -> list[str]:
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        return "" if value is None else str(value)

    return [PLACEHOLDER_PATTERN.sub(lambda m: text(values.get(m.group(1), m.group(0))), item)
            for item in items]
