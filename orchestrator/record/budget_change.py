"""`paratune resume NAME --set budget.KEY=VALUE`: a finished or stopped campaign given another
budget. Only budget keys may change (the rest is the spec its trials ran with); the saved
spec.yaml is rewritten, so a later resume keeps the change, and the journal records each
change as `budget_changed` with the old and the new value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from orchestrator.common.errors import CampaignStateError, SpecError, excerpt
from orchestrator.common.locks import CampaignLock
from orchestrator.record.campaign import JOURNAL_FILE
from orchestrator.record.journal import Journal
from orchestrator.campaign_spec import SPEC_FILE, apply_override, load_campaign_spec
from orchestrator.campaign_spec.yaml_input import load_yaml_file

BUDGET = "budget."


def check_budget_keys(overrides: list[str]) -> None:
    """Refuse, in one line naming it, a key that is not the budget's."""
    for item in overrides:
        key = item.partition("=")[0].strip()
        if not key.startswith(BUDGET) or key == BUDGET:
            raise SpecError(
                f"--set {excerpt(key, 60, quote=False)}: only budget keys can change on resume "
                "(budget.max_trials, budget.gpu_hours, budget.wall_clock_s, budget.patience, "
                "budget.max_concurrent); for any other, start a new campaign")


def change_budget(runs_dir: Path, name: str, overrides: list[str]) -> list[tuple[str, Any, Any]]:
    """Apply `overrides` to the campaign's saved spec, under its lock (not while a controller
    runs it); (key, old, new) for each budget value that changed, each journaled."""
    if not overrides:
        return []
    check_budget_keys(overrides)
    before = load_campaign_spec(runs_dir, name)
    after = load_campaign_spec(runs_dir, name, tuple(overrides))  # checked before any write
    old, new = before.budget.model_dump(mode="json"), after.budget.model_dump(mode="json")
    changes = [(f"{BUDGET}{key}", old[key], new[key]) for key in old if old[key] != new[key]]
    if not changes:
        return []
    folder = before.campaign_dir()
    with CampaignLock(folder, name):
        path = folder / SPEC_FILE
        data = load_yaml_file(path, saved=True)
        for item in overrides:
            apply_override(data, item, source=str(path))
        written = path.with_name(f".{SPEC_FILE}.new")
        try:
            written.unlink(missing_ok=True)  # never written through a link left there
            written.write_text(yaml.safe_dump(data))
            os.replace(written, path)  # whole, or not at all
        except OSError as exc:
            raise CampaignStateError(f"{path}: cannot save the new budget ({exc.strerror or exc}"
                                     "); nothing changed: free space or fix permissions, then "
                                     "run it again") from None
        journal = Journal(folder / JOURNAL_FILE, name=name)
        for key, was, now in changes:
            journal.record_budget_change(key, was, now)
    return changes
