"""A Megatron-Bridge trial's program: a recipe of megatron-bridge run by its run_recipe.py under
torchrun, the layout and the model shape as ConfigContainer overrides after the user's own.

    SCRIPT --recipe RECIPE --mode pretrain --dataset DATASET  USER_OVERRIDES  LAYOUT_OVERRIDES
        train.train_iters=N logger.log_interval=1 logger.log_throughput=true  TRIAL_ONLY

(run_recipe.py v0.6.0 `parse_args`: known options, then the trailing KEY=VALUE words in order,
which `process_config_with_overrides` applies in that order, so the layout's come last). Each
item is one argv word and never meets a shell. The environment is Megatron-LM's (megatron.py
`megatron_env`): CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP, which Megatron-Core's
overlapped TP communication and CP assume.
"""

from __future__ import annotations

from orchestrator.common.errors import SpecError
from orchestrator.trainers.megatron_bridge.section import MegatronBridgeSection
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.base import TrainerRun
from orchestrator.trainers.megatron import megatron_env
from orchestrator.trainers.megatron_bridge.capabilities import refusal
from orchestrator.trainers.megatron_bridge.overrides import bridge_overrides, trial_overrides


def bridge_section(spec) -> MegatronBridgeSection:
    """The spec's `trial.megatron_bridge`, or its defaults where the spec gives none."""
    return spec.trial.megatron_bridge or MegatronBridgeSection()


def recipe_args(section: MegatronBridgeSection) -> list[str]:
    """run_recipe.py's own options: the recipe, pretraining, and the data."""
    return ["--recipe", section.recipe, "--mode", "pretrain", "--dataset", section.dataset]


def layout_overrides(spec, layout) -> list[str]:
    """The layout's overrides, refused first with Bridge's reason where it cannot run it."""
    reason = refusal(spec, layout)
    if reason:
        raise SpecError(f"layout {layout.key()}: {reason}")
    return bridge_overrides(spec, layout)


def trial_program(spec, layout, trial_id: str, folder, steps: int) -> TrainerRun:
    """The trial's argv and environment for layout `config`, `steps` timed steps."""
    section = bridge_section(spec)
    values = placeholder_values(spec, layout, trial_id, folder, steps)
    program = [section.script, *recipe_args(section), *fill(section.overrides, values),
               *layout_overrides(spec, layout),
               *trial_overrides(steps + spec.trial.warmup_steps)]
    return TrainerRun(program=program, launcher="torchrun", env=megatron_env(spec, layout))
