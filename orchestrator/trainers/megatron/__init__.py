"""Megatron-LM and Megatron-DeepSpeed, which share their flags: the adapters (adapter.py), each
concept in its own module (flags, context, moe, precision, log, runtime, capabilities)."""

from orchestrator.common.lazy_exports import lazy_exports

# Imported when first asked for: the spec imports this folder's section.py while it is read.
__getattr__ = lazy_exports(__name__, {
    "TOOLS": "adapter",
    "MegatronDeepSpeedTrainer": "adapter",
    "MegatronLMTrainer": "adapter",
    "megatron_args": "adapter",
    "megatron_env": "adapter",
})
__all__ = ["MegatronDeepSpeedTrainer", "MegatronLMTrainer", "TOOLS", "megatron_args", "megatron_env"]
