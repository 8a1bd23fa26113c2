"""The Megatron-LM and Megatron-DeepSpeed adapters: a trial is the user's pretraining script under
torchrun with its base arguments, then the flags args.py renders and a trial's length and
logging; its training_log read back (log.py); the runtime the cost model prices (runtime.py)
and the layouts each refuses (capabilities.py)."""

from __future__ import annotations

from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun
from orchestrator.trainers.deepspeed.config import campaign_notes, trial_files
from orchestrator.trainers.megatron.args import (
    DS,
    LM,
    TOOLS,
    megatron_args,
    megatron_env,
    trial_args,
)
from orchestrator.trainers.megatron.capabilities import (
    ds_refusal,
    ds_space_problems,
    lm_refusal,
    lm_space_problems,
)
from orchestrator.trainers.megatron.flags import MEGATRON_DEEPSPEED_SOURCE, MEGATRON_LM_SOURCE
from orchestrator.trainers.megatron.log import parse_megatron_log
from orchestrator.trainers.megatron.precision import CHANGES_FILE, base_args_for
from orchestrator.trainers.megatron.runtime import MEGATRON_DEEPSPEED_RUNTIME, megatron_lm_runtime

__all__ = ["TOOLS", "MegatronDeepSpeedTrainer", "MegatronLMTrainer", "megatron_args",
           "megatron_env"]


class _MegatronTrainer(TrainerAdapter):
    measurement_args = ("--log-interval=1", "--log-throughput")
    trial_keys = ("megatron",)
    attention_kernel = None  # trial.flash_attention picks its attention flags

    def exporters(self) -> dict:
        from orchestrator.trainers.megatron.export import export_megatron  # imports export

        def write(spec, trial_id, layout, trial_dir=None):
            return export_megatron(self.name, spec, trial_id, layout)
        return {fmt: write for fmt in self.export_formats if fmt in (LM, DS, "megatron")}

    def script(self, spec) -> tuple[str, str] | None:
        return "trial.megatron.script", spec.trial.megatron.script


    def run(self, spec, layout, trial_id, folder, steps) -> TrainerRun:
        section = spec.trial.megatron
        values = placeholder_values(spec, layout, trial_id, folder, steps)
        base, removed = base_args_for(self.name, layout, fill(section.args, values))
        program = [section.script, *base,
                   *megatron_args(self.name, spec, layout, str(folder.deepspeed_config)),
                   *trial_args(self.name, steps + spec.trial.warmup_steps)]
        files = trial_files(spec, layout) if self.name == DS else {}
        if removed:
            files = {**files, CHANGES_FILE: "".join(line + "\n" for line in removed)}
        return TrainerRun(program=program, launcher="torchrun", files=files,
                          env=megatron_env(spec, layout))


class MegatronLMTrainer(_MegatronTrainer):
    name = LM
    tool = MEGATRON_LM_SOURCE
    runtime = megatron_lm_runtime()  # its defaults: no overlap
    runtime_name = "megatron"
    export_formats = ("torchrun", "sbatch", LM)

    def runtime_for(self, spec) -> ZeroEngine:
        return megatron_lm_runtime(spec.trial.megatron.args if spec.trial.megatron else ())

    def check_spec(self, spec) -> list[str]:
        return lm_space_problems(spec)

    def layout_refusal(self, spec, layout) -> str | None:
        return lm_refusal(spec, layout)

    def parse_log(self, text: str) -> LogMetrics:
        return parse_megatron_log(text, read_tflops=True)


class MegatronDeepSpeedTrainer(_MegatronTrainer):
    name = DS
    tool = MEGATRON_DEEPSPEED_SOURCE
    runtime = MEGATRON_DEEPSPEED_RUNTIME
    # `megatron` is the name older releases gave its flags' format.
    export_formats = ("torchrun", "sbatch", DS, "megatron", "deepspeed")

    def base_config_notes(self, spec, configs) -> list[str]:
        return [f"trial.megatron.deepspeed_config: {line}"
                for line in campaign_notes(spec, configs)]

    def check_spec(self, spec) -> list[str]:
        return ds_space_problems(spec)

    def layout_refusal(self, spec, layout) -> str | None:
        return ds_refusal(spec, layout)

    def parse_log(self, text: str) -> LogMetrics:
        return parse_megatron_log(text, read_tflops=False)
