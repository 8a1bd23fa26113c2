"""The built-in trainer's adapter: the job reads RANK and WORLD_SIZE from its environment and
writes its own result file, so it needs no log parsing; its settings are settings.py's and the
layouts it refuses capabilities.py's."""

from __future__ import annotations

from orchestrator.costmodel.zero_engine import PYTORCH
from orchestrator.trainers.builtin.capabilities import refusal, space_problems
from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.trainers.builtin.settings import builtin_run, job_flags, job_settings

__all__ = ["BuiltinTrainer", "builtin_run", "job_flags", "job_settings"]


class BuiltinTrainer(TrainerAdapter):
    name = "builtin"
    tool = "ParaTune's trial job (jobs/)"
    runtime = PYTORCH  # PyTorch's DDP, ZeroRedundancyOptimizer, FSDP2 (jobs/layout.py)
    runtime_name = "pytorch"
    export_formats = ("torchrun", "yaml", "sbatch")
    runs_a_program = False
    attention_kernel = "always runs PyTorch SDPA"

    def check_spec(self, spec) -> list[str]:
        return space_problems(spec)

    def layout_refusal(self, spec, layout) -> str | None:
        return refusal(spec, layout)

    def run(self, spec, layout, trial_id, folder, steps) -> TrainerRun:
        return builtin_run(folder, job_settings(spec, layout, trial_id, steps))

    def parse_log(self, text: str) -> LogMetrics:
        return LogMetrics()  # the job reports through its result file
