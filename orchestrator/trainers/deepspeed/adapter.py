"""DeepSpeed: the user's training script under torchrun, with a DeepSpeed config per layout.

The config is the user's base config (if any) with ParaTune's batch split, ZeRO stage, offload,
overlap, bucket size and per-step reporting laid over it (deepspeed_config.py), its changes
written beside it. Results come from DeepSpeed's own ThroughputTimer lines, logged at every
`steps_per_print` (deepspeed/utils/timer.py, DeepSpeed 0.19.8):

    [2026-11-30 10:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=8/global_step=8,
    RunningAvgSamplesPerSec=12.3, CurrSamplesPerSec=12.5, MemAllocated=1.2GB, MaxMemAllocated=2.3GB

(one line; every rank logs it, so each global step is read once). A `loss` the script prints
(`loss=2.31`, `loss: 2.31`) is read too.

Mixture of experts: the expert layout is a model-construction argument of DeepSpeed's MoE
layer (`ep_size`), not a config key, so it reaches the script through `{ep}` and `{etp}` in its
args (examples/deepspeed-moe.yaml); a range of them its args never carry is refused.

Context parallelism is DeepSpeed-Ulysses (`deepspeed.sequence.layer.DistributedAttention`,
an all-to-all over heads: cp_comm_type a2a only). The script builds its sequence-parallel group
of `{cp}` ranks itself (`{cp_comm_type}` is a placeholder too), and the config gets
`sequence_parallel_size` (deepspeed_config.py), by which DeepSpeed counts data-parallel ranks.
"""

from __future__ import annotations

import re

from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.deepspeed.capabilities import refusal, space_problems
from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.trainers.deepspeed.config import TOOL, campaign_notes, trial_files

THROUGHPUT = re.compile(
    r"global_step=(?P<step>\d+), RunningAvgSamplesPerSec=(?P<avg>[-\d.eE+]+), "
    r"CurrSamplesPerSec=(?P<curr>[-\d.eE+inf]+), MemAllocated=(?P<mem>[\d.]+)GB, "
    r"MaxMemAllocated=(?P<maxmem>[\d.]+)GB")
LOSS = re.compile(r"\bloss\s*[=:]\s*(?P<loss>[-\d.]+(?:[eE][-+]?\d+)?)")


class DeepSpeedTrainer(TrainerAdapter):
    name = "deepspeed"
    tool = TOOL
    # DDP is DeepSpeed's engine without ZeRO: bf16 gradients reduced after the backward.
    runtime = ZeroEngine(ddp_engine="deepspeed")
    runtime_name = "deepspeed"
    trial_keys = ("deepspeed",)
    export_formats = ("torchrun", "sbatch", "deepspeed")

    def base_config_notes(self, spec, configs) -> list[str]:
        return [f"trial.deepspeed.config: {line}" for line in campaign_notes(spec, configs)]

    def exporters(self) -> dict:
        from orchestrator.trainers.deepspeed.export import export_deepspeed  # imports export

        return {"deepspeed": export_deepspeed}

    def script(self, spec) -> tuple[str, str] | None:
        return "trial.deepspeed.script", spec.trial.deepspeed.script

    def check_spec(self, spec) -> list[str]:
        return space_problems(spec)

    def layout_refusal(self, spec, layout) -> str | None:
        return refusal(spec, layout)

    def run(self, spec, layout, trial_id, folder, steps) -> TrainerRun:
        section = spec.trial.deepspeed
        values = placeholder_values(spec, layout, trial_id, folder, steps)
        program = [section.script, *fill(section.args, values),
                   section.config_arg, str(folder.deepspeed_config)]
        files = trial_files(spec, layout)
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
