"""Any other trainer, `trial.command`: the user's argv run as it is, read by PARATUNE_RESULT or
the user's regexes (adapter.py)."""

from orchestrator.trainers.command.adapter import CommandTrainer

__all__ = ["CommandTrainer"]
