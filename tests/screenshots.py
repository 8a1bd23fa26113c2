"""Where the screenshots tests take go: a temporary folder, and the folder $PARATUNE_SHOTS
names too (`PARATUNE_SHOTS=docs` refreshes the ones the docs show)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conftest import ROOT


def keep_screenshot(shot: Path, name: str) -> None:
    """Copy `shot` to $PARATUNE_SHOTS/`name` (relative to the checkout) when it is set."""
    folder = os.environ.get("PARATUNE_SHOTS")
    if folder:
        target = ROOT / folder
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / name)
