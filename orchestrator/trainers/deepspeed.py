"""DeepSpeed: the user's training script under torchrun, with a DeepSpeed config per layout.

The config is the user's base config (if any) with ParaTune's batch split, ZeRO stage and
per-step reporting laid over it. Results come from DeepSpeed's own ThroughputTimer lines,
logged at every `steps_per_print` (deepspeed/utils/timer.py, DeepSpeed 0.19.8):

    [2026-11-30 10:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=8/global_step=8,
    RunningAvgSamplesPerSec=12.3, CurrSamplesPerSec=12.5, MemAllocated=1.2GB, MaxMemAllocated=2.3GB

(one line; every rank logs it, so each global step is read once). A `loss` the script prints
(`loss=2.31`, `loss: 2.31`) is read too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from orchestrator.common.errors import SpecError
from orchestrator.space import ShardingFactors, dp_mesh
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.trial.folder import DEEPSPEED_CONFIG_FILE

THROUGHPUT = re.compile(
    r"global_step=(?P<step>\d+), RunningAvgSamplesPerSec=(?P<avg>[-\d.eE+]+), "
    r"CurrSamplesPerSec=(?P<curr>[-\d.eE+inf]+), MemAllocated=(?P<mem>[\d.]+)GB, "
    r"MaxMemAllocated=(?P<maxmem>[\d.]+)GB")
LOSS = re.compile(r"\bloss\s*[=:]\s*(?P<loss>[-\d.]+(?:[eE][-+]?\d+)?)")


def zero_stage(spec, config) -> int:
    """A layout's ZeRO stage; AMSP's sharding factors only where they are one of ZeRO's
    points on the layout's data-parallel mesh (DeepSpeed shards no other way)."""
    if config.sharding is None:
        return config.zero_stage
    mesh = dp_mesh(config.dp, config.tp, spec.gpus_per_node)
    for stage in (0, 1, 2, 3):
        if ShardingFactors.from_zero_stage(stage, *mesh).as_tuple() == config.sharding.as_tuple():
            return stage
    raise SpecError(f"deepspeed: AMSP sharding factors {config.sharding.as_tuple()} are no ZeRO "
                    "stage, and DeepSpeed shards weights, gradients and optimizer states no other "
                    "way; export the built-in trainer's formats (torchrun, sbatch, yaml), which "
                    "run them")


def deepspeed_config(spec, config, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A DeepSpeed config for a layout: the base config with the batch split, the ZeRO stage
    (other `zero_optimization` keys kept), bf16 on GPUs unless the base chose fp16, and a
    throughput line logged at every step."""
    data = dict(base or {})
    data.update({
        "train_batch_size": config.global_batch_size(),
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": config.grad_accum_steps,
        "steps_per_print": 1,
        "log_level": "info",  # DeepSpeed logs its throughput lines at INFO (WARNING by default)
    })
    data["zero_optimization"] = {**data.get("zero_optimization", {}),
                                 "stage": zero_stage(spec, config)}
    if not data.get("fp16", {}).get("enabled"):
        data["bf16"] = {**data.get("bf16", {}), "enabled": spec.cluster.device != "cpu"}
    data.setdefault("gradient_clipping", 1.0)
    return data


def base_config(spec) -> dict[str, Any] | None:
    """The user's base ds_config (`trial.deepspeed.config`, or `trial.megatron.deepspeed_config`
    for Megatron-DeepSpeed), read relative to the trial's working directory."""
    if spec.trial.deepspeed:
        path, key = spec.trial.deepspeed.config, "trial.deepspeed.config"
    elif spec.trial.megatron:
        path, key = spec.trial.megatron.deepspeed_config, "trial.megatron.deepspeed_config"
    else:
        return None
    if path is None:
        return None
    full = Path(spec.trial.workdir or ".") / path
    try:
        data = json.loads(full.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{key}: cannot read {full} as JSON ({exc}); "
                        "give the path of your ds_config.json") from None
    if not isinstance(data, dict):
        raise SpecError(f"{key}: {full} holds no JSON object")
    return data


class DeepSpeedTrainer(TrainerAdapter):
    name = "deepspeed"
    tool = "DeepSpeed 0.19.8"

    def run(self, spec, config, trial_id, folder, steps) -> TrainerRun:
        section = spec.trial.deepspeed
        values = placeholder_values(spec, config, trial_id, folder, steps)
        program = [section.script, *fill(section.args, values),
                   section.config_arg, str(folder.deepspeed_config)]
        files = {DEEPSPEED_CONFIG_FILE: json.dumps(
            deepspeed_config(spec, config, base_config(spec)), indent=2)}
        env = {"DS_ACCELERATOR": "cpu"} if spec.cluster.device == "cpu" else {}
        return TrainerRun(program=program, launcher="torchrun", files=files, env=env)

    def parse_log(self, text: str) -> LogMetrics:
        metrics = LogMetrics()
        seen: set[int] = set()
        for line in text.splitlines():
            match = THROUGHPUT.search(line)
            if match:
                step = int(match["step"])
                if step not in seen:  # every rank logs each step
                    seen.add(step)
                    metrics.samples_per_s.append(float(match["curr"]))
                    metrics.peak_memory_gb = max(metrics.peak_memory_gb or 0.0,
                                                 float(match["maxmem"])) or None
                continue
            loss = LOSS.search(line)
            if loss:
                metrics.losses.append(float(loss["loss"]))
        return metrics
