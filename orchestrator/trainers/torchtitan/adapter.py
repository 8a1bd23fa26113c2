"""The torchtitan adapter: a trial is `torchrun -m torchtitan.train` with args.py's arguments, its
log read by log.py; the runtime the cost model prices and the layouts it refuses
(capabilities.py)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.result import PER_OP_SELECTIVE_FUSED_QKV
from orchestrator.trainers.arguments import placeholder_values
from orchestrator.trainers.torchtitan.capabilities import refusal, space_problems
from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.trainers.torchtitan.args import (
    TOOL,
    export_values,
    layout_args,
    torchtitan_args,
    torchtitan_section,
)
from orchestrator.trainers.torchtitan.log import parse_torchtitan_log

__all__ = ["TOOL", "TorchtitanTrainer", "export_values", "layout_args", "torchtitan_args",
           "torchtitan_section"]


class TorchtitanTrainer(TrainerAdapter):
    name = "torchtitan"
    tool = TOOL
    measurement_args = ("--metrics.log-freq=1",)
    # PyTorch's FSDP2 and DDP, reducing after every micro-batch, sharding over dp_shard x cp;
    # its "selective" checkpointing is per-op (SelectiveAC: every second matmul replayed), over
    # its models' fused wqkv projection (`fuse_qkv=True` in torchtitan 0.3's Llama 3 and Qwen3).
    runtime = ZeroEngine(zero_engine="torch", grads_once_per_step=False, shards_over_cp=True,
                         selective_recompute=PER_OP_SELECTIVE_FUSED_QKV)
    runtime_name = "torchtitan"
    trial_keys = ("torchtitan",)
    export_formats = ("torchrun", "sbatch", "torchtitan")
    script_formats = ("torchtitan",)

    def exporters(self) -> dict:
        from orchestrator.trainers.torchtitan.export import export_torchtitan  # imports export

        return {"torchtitan": lambda spec, trial_id, layout, trial_dir=None:
                export_torchtitan(spec, trial_id, layout)}

    def unmeasured_export_note(self, spec) -> str:
        """torchtitan builds its model from its own config, not the campaign's."""
        section = torchtitan_section(spec)
        return (f"; its model is torchtitan's {section.module} {section.config}, not "
                f"{spec.model.name}: edit --config in the file")

    def check_spec(self, spec) -> list[str]:
        return space_problems(spec)

    def layout_refusal(self, spec, layout) -> str | None:
        return refusal(spec, layout)

    def run(self, spec, layout, trial_id, folder, steps) -> TrainerRun:
        values = placeholder_values(spec, layout, trial_id, folder, steps)
        trial = [f"--training.steps={values['total_steps']}", "--metrics.log-freq=1",
                 f"--dump-folder={Path(folder.path) / 'outputs'}"]
        program = ["-m", torchtitan_section(spec).entry,
                   *torchtitan_args(spec, layout, values, trial)]
        return TrainerRun(program=program, launcher="torchrun")

    def parse_log(self, text: str) -> LogMetrics:
        return parse_torchtitan_log(text)
