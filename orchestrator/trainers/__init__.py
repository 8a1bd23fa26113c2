"""Trainer adapters: how ParaTune runs and reads each training program it can tune.

`builtin` (jobs/), `deepspeed`, `torchtitan`, `megatron-lm`, `megatron-deepspeed` and `command`
(anything else); `trainer_for` builds the one a spec's `trial.trainer` names.
"""

from __future__ import annotations

from orchestrator.trainers.base import LogMetrics, Measure, TrainerAdapter, TrainerRun
from orchestrator.trainers.builtin import BuiltinTrainer
from orchestrator.trainers.command import CommandTrainer
from orchestrator.trainers.deepspeed import DeepSpeedTrainer
from orchestrator.trainers.deepspeed_config import campaign_notes
from orchestrator.trainers.megatron import MegatronDeepSpeedTrainer, MegatronLMTrainer
from orchestrator.trainers.torchtitan import TorchtitanTrainer


def trainer_for(spec) -> TrainerAdapter:
    """The adapter of the spec's `trial.trainer`."""
    name = spec.trial.trainer
    if name == "builtin":
        return BuiltinTrainer()
    if name == "deepspeed":
        return DeepSpeedTrainer()
    if name == "megatron-lm":
        return MegatronLMTrainer()
    if name == "megatron-deepspeed":
        return MegatronDeepSpeedTrainer()
    if name == "torchtitan":
        return TorchtitanTrainer()
    if name == "command":
        return CommandTrainer(spec.trial.log_metrics)
    raise ValueError(f"trial.trainer {name!r} has no adapter yet")


def base_config_notes(spec, configs) -> list[str]:
    """What the campaign's trials change in the user's base DeepSpeed config and which of its
    settings a layout contradicts, each as one line to say at the campaign's start."""
    if spec.trial.trainer not in ("deepspeed", "megatron-deepspeed"):
        return []
    key = "trial.deepspeed.config" if spec.trial.deepspeed else "trial.megatron.deepspeed_config"
    return [f"{key}: {line}" for line in campaign_notes(spec, configs)]


__all__ = ["BuiltinTrainer", "CommandTrainer", "DeepSpeedTrainer", "LogMetrics", "Measure",
           "MegatronDeepSpeedTrainer", "MegatronLMTrainer", "TorchtitanTrainer", "TrainerAdapter",
           "TrainerRun", "base_config_notes", "trainer_for"]
