"""What a trial is given for one layout: the built-in job's settings (or its command-line
flags), an external trainer's argv with its placeholders filled in, and a DeepSpeed config.

Shared by the scheduling loop (to run trials) and by export (to write launch files that rerun
a winner without ParaTune), so both always agree.
"""

from __future__ import annotations

from typing import Any

from orchestrator.placeholders import PLACEHOLDER_PATTERN
from orchestrator.search_spaces import ParallelConfig
from orchestrator.spec import CampaignSpec
from orchestrator.trial_folder import DEEPSPEED_CONFIG_FILE


def deepspeed_config(spec: CampaignSpec, config: ParallelConfig) -> dict[str, Any]:
    """A DeepSpeed config for a layout: batch split, ZeRO stage, bf16 on GPUs."""
    return {
        "train_batch_size": config.global_batch_size(),
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": config.grad_accum_steps,
        "zero_optimization": {"stage": config.zero_stage},
        "bf16": {"enabled": spec.cluster.device != "cpu"},
        "gradient_clipping": 1.0,
        "steps_per_print": 1,
    }


def command_argv(
    spec: CampaignSpec, config: ParallelConfig, trial_id: str, trial_dir: str
) -> list[str]:
    """trial.command with its {placeholders} filled in; each item stays one argument."""
    values: dict[str, Any] = {k: v for k, v in config.to_params().items()}
    values.update({
        "world_size": config.world_size, "nodes": spec.scale.nodes,
        "gpus_per_node": spec.gpus_per_node, "global_batch_size": spec.scale.global_batch_size,
        "seq_len": spec.model.seq_len, "steps": spec.trial.steps, "trial_id": trial_id,
        "trial_dir": trial_dir, "deepspeed_config": f"{trial_dir}/{DEEPSPEED_CONFIG_FILE}",
    })

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        return "" if value is None else str(value)

    return [PLACEHOLDER_PATTERN.sub(lambda m: text(values.get(m.group(1), m.group(0))), item)
            for item in spec.trial.command or []]


def job_settings(spec: CampaignSpec, config: ParallelConfig, trial_id: str) -> dict[str, Any]:
    """The built-in trial job's settings (see jobs/config.py) for one config."""
    return {
        "model": spec.model.model_dump(exclude={"name"}),
        **{k: v for k, v in config.to_params().items() if v is not None},
        "steps": spec.trial.steps,
        "warmup_steps": spec.trial.warmup_steps,
        "peak_tflops": spec.cluster.peak_tflops,
        "trial_id": trial_id,
    }


def job_flags(settings: dict[str, Any]) -> list[str]:
    """Command-line flags of `python -m jobs.train` equivalent to a settings dict."""
    flags: list[str] = []
    items = list(settings.get("model", {}).items()) + [
        (k, v) for k, v in settings.items() if k not in ("model", "result_file")
    ]
    for key, value in items:
        if value is not None:
            flags += ["--" + key.replace("_", "-"), str(value)]
    return flags
