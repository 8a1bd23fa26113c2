"""Any other trainer: `trial.command`, an argv run as it is (it starts its own ranks), with its
{placeholders} filled and a DeepSpeed config for the layout at {deepspeed_config}.

It reports either a `PARATUNE_RESULT {json}` line (or the file at $PARATUNE_RESULT_FILE), or
log lines that the user's regexes in `trial.log_metrics` read: one value per matching line,
from the regex's first group.
"""

from __future__ import annotations

import json
import re

from orchestrator.common.errors import SpecError
from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.trainers.deepspeed.config import deepspeed_config
from orchestrator.trainers.registry import runtimes
from orchestrator.trial.folder import DEEPSPEED_CONFIG_FILE

# What a program without `trial.runtime` is priced as (the base's runtime).
DEFAULT_RUNTIME = "DeepSpeed's ZeRO, PyTorch's DDP at stage 0"

# log_metrics key -> (LogMetrics list, factor to its unit)
_TARGETS = {"step_time_s": ("step_times_s", 1.0), "tokens_per_s": ("tokens_per_s", 1.0),
            "tokens_per_s_per_gpu": ("tokens_per_s_per_gpu", 1.0),
            "tflops_per_gpu": ("tflops_per_gpu", 1.0), "mfu_percent": ("mfu", 0.01),
            "loss": ("losses", 1.0)}


class CommandTrainer(TrainerAdapter):
    name = "command"
    tool = "any program that reports PARATUNE_RESULT or matches trial.log_metrics"
    export_formats = ("command", "torchrun", "sbatch", "deepspeed")
    trial_keys = ("command", "log_metrics", "runtime")
    script_formats = ("command",)
    runtime_assumed = True

    def exporters(self) -> dict:
        return {"command": export_command}

    def __init__(self, log_metrics: dict[str, str] | None = None):
        self.log_metrics = dict(log_metrics or {})

    @classmethod
    def for_spec(cls, spec) -> "CommandTrainer":
        return cls(spec.trial.log_metrics)

    def runtime_for(self, spec) -> ZeroEngine:
        """Its code is not seen: the runtime of the trainer `trial.runtime` names, else the
        default (DeepSpeed's ZeRO, PyTorch's DDP at stage 0)."""
        if spec.trial.runtime is None:
            return self.runtime
        return runtimes()[spec.trial.runtime]

    def priced_as(self, spec) -> str:
        if spec.trial.runtime is not None:
            return f"{spec.trial.runtime} (trial.runtime)"
        return f"{DEFAULT_RUNTIME} (the default for trial.command; set trial.runtime)"

    def run(self, spec, layout, trial_id, folder, steps) -> TrainerRun:
        program = fill(spec.trial.command, placeholder_values(spec, layout, trial_id, folder, steps))
        files = {DEEPSPEED_CONFIG_FILE: json.dumps(deepspeed_config(spec, layout), indent=2)}
        return TrainerRun(program=program, launcher="self", files=files)

    def parse_log(self, text: str) -> LogMetrics:
        metrics = LogMetrics()
        patterns = {name: re.compile(p) for name, p in self.log_metrics.items()}
        matched: set[str] = set()
        for line in text.splitlines():
            for name, pattern in patterns.items():
                match = pattern.search(line)
                if not match:
                    continue
                try:
                    value = float(match.group(1).replace(",", ""))
                except ValueError:
                    continue
                matched.add(name)
                if name == "peak_memory_gb":
                    metrics.peak_memory_gb = max(metrics.peak_memory_gb or 0.0, value)
                else:
                    target, factor = _TARGETS[name]
                    getattr(metrics, target).append(value * factor)
        unmatched = [name for name in patterns if name not in matched]
        if unmatched and metrics.steps == 0:
            name = unmatched[0]
            metrics.error = (f"no line matched trial.log_metrics.{name} "
                             f"({self.log_metrics[name]!r}); ")
        return metrics


def export_command(spec, trial_id: str, layout, trial_dir=None) -> str:
    """`--format command`: the campaign's own `trial.command` as its trials ran it."""
    from orchestrator.export.program_scripts import export_program_torchrun  # imports export

    if spec.trial.command is None:
        raise SpecError(f"--format command: campaign {spec.name!r} ran trainer "
                        f"{spec.trial.trainer!r}, not a trial.command; --format torchrun "
                        "writes its own program")
    return export_program_torchrun(spec, trial_id, layout, trial_dir)
