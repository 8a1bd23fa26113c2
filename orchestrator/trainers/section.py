"""A trainer's own section of the spec's `trial` (`trial.deepspeed`, `trial.megatron`, ...):
what the user gives that trainer, declared in the trainer's folder, never in the spec package.

A trainer folder that reads a section holds a `section.py` whose `SECTION` is a
`TrainerSection`; `trial_key` is the key it sits under. The spec builds its `trial` model from
every registered folder's section (registry.sections()), and refuses a section under another
trainer.
"""

from __future__ import annotations

from typing import ClassVar

from orchestrator.campaign_spec.sections import Strict


class TrainerSection(Strict):
    """The base of every trainer's section: strict keys, as every spec section."""

    # The key under `trial` (`trial.<trial_key>`); `-` in a trainer's name is written `_`.
    trial_key: ClassVar[str]

    def input_files(self) -> list[str]:
        """The files of the user's the trials read (a script, a base config), as given: an
        export must never be written over one of them."""
        return []
