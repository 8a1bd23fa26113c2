"""Where campaigns live and where MLflow records them by default: the one place that reads
$PARATUNE_RUNS_DIR and $MLFLOW_TRACKING_URI for those defaults."""

from __future__ import annotations

import os
from pathlib import Path


def runs_root(option: Path | str | None = None, configured: str = "runs") -> Path:
    """The runs directory: an explicit option, else $PARATUNE_RUNS_DIR, else the configured one."""
    if option:
        return Path(option)
    return Path(os.environ.get("PARATUNE_RUNS_DIR") or configured)


def default_tracking_uri(runs_dir: Path) -> str:
    """$MLFLOW_TRACKING_URI, else an SQLite store at <runs_dir>/mlflow.db (absolute)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(Path(runs_dir) / 'mlflow.db').resolve()}"
