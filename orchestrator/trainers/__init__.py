"""Trainer adapters: how ParaTune runs and reads each training program it can tune.

`builtin` (jobs/), `deepspeed`, `torchtitan`, `megatron-lm`, `megatron-deepspeed` and `command`
(anything else), and whatever else registry.py lists; `trainer_for` builds the one a spec's
`trial.trainer` names. The names below are imported when first used, so asking the registry
(as the spec does) imports no adapter.
"""

from __future__ import annotations

from orchestrator.common.lazy_exports import lazy_exports

_WHERE = {
    "LogMetrics": "base", "Measure": "base", "TrainerAdapter": "base", "TrainerRun": "base",
    "BuiltinTrainer": "builtin.adapter", "CommandTrainer": "command.adapter",
    "DeepSpeedTrainer": "deepspeed.adapter", "MegatronDeepSpeedTrainer": "megatron.adapter",
    "MegatronLMTrainer": "megatron.adapter", "TorchtitanTrainer": "torchtitan.adapter",
    "trainer_for": "registry",
}


def base_config_notes(spec, configs) -> list[str]:
    """What the campaign's trials change in the user's base config and which of its settings a
    layout contradicts, each as one line to say at the campaign's start."""
    from orchestrator.trainers.registry import trainer_for

    return trainer_for(spec).base_config_notes(spec, configs)


__getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [*sorted(_WHERE), "base_config_notes"]
