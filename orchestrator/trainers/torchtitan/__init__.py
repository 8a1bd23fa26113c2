"""torchtitan 0.3.0: its arguments for a layout (adapter.py), FP8 and offload (precision.py) and
the layouts it refuses (capabilities.py)."""

from orchestrator.trainers.torchtitan.adapter import (
    TOOL,
    TorchtitanTrainer,
    export_values,
    layout_args,
    torchtitan_args,
    torchtitan_section,
)

__all__ = ["TOOL", "TorchtitanTrainer", "export_values", "layout_args", "torchtitan_args",
           "torchtitan_section"]
