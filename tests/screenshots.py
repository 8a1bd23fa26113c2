"""Headless Chromium for the pages the tests look at (a DOM dump or a screenshot), and where
the screenshots go: a temporary folder, and the folder $PARATUNE_SHOTS names too
(`PARATUNE_SHOTS=docs` refreshes the ones the docs show)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(url: str, profile: Path, *args: str, window: str = "1280,720",
             budget_ms: int = 5000) -> subprocess.CompletedProcess:
    """Headless Chromium on `url` with a profile of its own, no network of its own (updates,
    sync), `args` such as --dump-dom or --screenshot=PATH; `budget_ms` of virtual time lets
    the page's scripts finish."""
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", f"--window-size={window}",
             f"--virtual-time-budget={budget_ms}"]
    return subprocess.run(flags + list(args) + [url], capture_output=True, text=True, timeout=180)


def keep_screenshot(shot: Path, name: str) -> None:
    """Copy `shot` to $PARATUNE_SHOTS/`name` (relative to the checkout) when it is set."""
    folder = os.environ.get("PARATUNE_SHOTS")
    if folder:
        target = ROOT / folder
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / name)
