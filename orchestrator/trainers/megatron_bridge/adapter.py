"""The Megatron-Bridge trainer, "megatron-bridge": the TrainerAdapter that the registry names,
each of its hooks answered by this folder's module for that concept (program.py, log.py,
capabilities.py, runtime.py, export.py)."""

from __future__ import annotations

from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.trainers.megatron_bridge.capabilities import NAME, TOOL, refusal, space_refusals
from orchestrator.trainers.megatron_bridge.log import parse_bridge_log
from orchestrator.trainers.megatron_bridge.overrides import MEASUREMENT, TRIAL_ONLY
from orchestrator.trainers.megatron_bridge.program import bridge_section, trial_program
from orchestrator.trainers.megatron_bridge.runtime import bridge_runtime


class MegatronBridgeTrainer(TrainerAdapter):
    name = NAME
    tool = TOOL
    measurement_args = MEASUREMENT + TRIAL_ONLY  # the generic exports name them to drop
    runtime = bridge_runtime()
    export_formats = ("torchrun", "sbatch", NAME)

    def run(self, spec, layout, trial_id, folder, steps) -> TrainerRun:
        return trial_program(spec, layout, trial_id, folder, steps)

    def parse_log(self, text: str) -> LogMetrics:
        return parse_bridge_log(text)

    def check_spec(self, spec) -> list[str]:
        return space_refusals(spec)

    def layout_refusal(self, spec, layout) -> str | None:
        return refusal(spec, layout)

    def runtime_for(self, spec):
        return bridge_runtime(bridge_section(spec).overrides)

    def exporters(self) -> dict:
        from orchestrator.trainers.megatron_bridge.export import export_megatron_bridge  # imports export

        return {NAME: lambda spec, trial_id, layout, trial_dir=None:
                export_megatron_bridge(spec, trial_id, layout)}
