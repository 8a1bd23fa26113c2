"""DeepSpeed: the user's script under torchrun (adapter.py) with a DeepSpeed config per layout
over the user's base config (config.py); the layouts it refuses (capabilities.py)."""

from orchestrator.trainers.deepspeed.adapter import THROUGHPUT, DeepSpeedTrainer

__all__ = ["THROUGHPUT", "DeepSpeedTrainer"]
