"""How one service is set up: where it keeps state, its database, its limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServiceConfig:
    state_dir: Path  # the database (SQLite), submitted specs, controller logs
    runs_dir: Path  # where the campaigns run (their journals, trial folders, MLflow store)
    database_url: str | None = None  # default: SQLite in state_dir
    max_running: int = 4  # campaigns whose controllers run at once; the rest wait in the queue
    max_trials: int | None = None  # concurrent trials across all campaigns
    max_restarts: int = 5  # a controller that keeps dying fails its campaign after this many
    backoff_s: float = 1.0  # doubled after each restart, up to 60 s
    # A controller that ran this long before it died starts its restart count afresh, so a
    # long campaign is not failed by deaths days apart.
    healthy_run_s: float = 300.0
    tick_s: float = 0.25
    run_as: str | None = None  # the OS user controllers and trials run as (isolation.py)

    @property
    def url(self) -> str:
        return self.database_url or f"sqlite:///{(self.state_dir / 'server.db').resolve()}"

    @property
    def trial_workdir(self) -> Path:
        """Where the trials of users without a code grant run: an empty folder of the
        service's, out of the runs directory (which campaigns may change), so nothing a user
        placed is imported."""
        return self.state_dir / "workdir"

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def spec_path(self, name: str) -> Path:
        """Where a campaign's first controller reads its spec (with --run-as, one of the two
        folders of the state directory its user may read: isolation.py)."""
        return self.state_dir / "specs" / f"{name}.yaml"
