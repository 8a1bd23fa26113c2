"""torchtitan 0.3.0: its arguments for a layout (adapter.py), FP8 and offload (precision.py) and
the layouts it refuses (capabilities.py)."""

from orchestrator.common.lazy_exports import lazy_exports

# Imported when first asked for: the spec imports this folder's section.py while it is read.
__getattr__ = lazy_exports(__name__, {
    "TOOL": "adapter",
    "TorchtitanTrainer": "adapter",
    "export_values": "adapter",
    "layout_args": "adapter",
    "torchtitan_args": "adapter",
    "torchtitan_section": "adapter",
})
__all__ = ["TOOL", "TorchtitanTrainer", "export_values", "layout_args", "torchtitan_args", "torchtitan_section"]
