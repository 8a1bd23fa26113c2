"""Megatron-LM and Megatron-DeepSpeed, which share their flags: the adapters (adapter.py), each
concept in its own module (flags, context, moe, precision, log, runtime, capabilities)."""

from orchestrator.trainers.megatron.adapter import (
    TOOLS,
    MegatronDeepSpeedTrainer,
    MegatronLMTrainer,
    megatron_args,
    megatron_env,
)

__all__ = ["TOOLS", "MegatronDeepSpeedTrainer", "MegatronLMTrainer", "megatron_args",
           "megatron_env"]
