"""DeepSpeed: the user's script under torchrun (adapter.py) with a DeepSpeed config per layout
over the user's base config (config.py); the layouts it refuses (capabilities.py)."""

from orchestrator.common.lazy_exports import lazy_exports

# Imported when first asked for: the spec imports this folder's section.py while it is read.
__getattr__ = lazy_exports(__name__, {
    "THROUGHPUT": "adapter",
    "DeepSpeedTrainer": "adapter",
})
__all__ = ["DeepSpeedTrainer", "THROUGHPUT"]
