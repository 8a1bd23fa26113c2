"""Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge, megatron-bridge 0.6.2 on the package index): a
trainer in one folder.

- section.py: its spec section, `trial.megatron_bridge`, and the rule on its overrides;
- overrides.py: a layout and the model shape as ConfigContainer KEY=VALUE overrides;
- capabilities.py: the knob values it runs, each limit with its reason and source;
- program.py: a trial's argv (run_recipe.py, the recipe, the overrides) and environment;
- adapter.py: `MegatronBridgeTrainer`, the TrainerAdapter named "megatron-bridge";
- log.py: its training_log lines read back;
- runtime.py: its ZeRO and overlap engine for the cost model;
- export.py: the `megatron-bridge` launch file, a torchrun script of the winner's recipe.
"""

from orchestrator.common.lazy_exports import lazy_exports

# Imported when first asked for: the spec imports this folder's section.py while it is read.
__getattr__ = lazy_exports(__name__, {
    "MegatronBridgeTrainer": "adapter",
})
__all__ = ["MegatronBridgeTrainer"]
