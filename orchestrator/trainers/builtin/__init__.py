"""The built-in trainer (jobs/): its settings for a layout (settings.py), the layouts it refuses
(capabilities.py) and its adapter (adapter.py)."""

from orchestrator.trainers.builtin.adapter import BuiltinTrainer, builtin_run, job_flags, job_settings

__all__ = ["BuiltinTrainer", "builtin_run", "job_flags", "job_settings"]
