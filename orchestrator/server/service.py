"""One service's parts, made once and shared by the API and the supervisor."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.server.campaign_summary import ProgressCache
from orchestrator.server.config import ServiceConfig
from orchestrator.server.db import FINAL_STATES, Campaign, Database
from orchestrator.server.isolation import RunAs, isolate
from orchestrator.server.links import MlflowLinks
from orchestrator.server.slot_pool import SlotPool
from orchestrator.server.submission import parse_submission
from orchestrator.server.submission_as_user import names_files, parse_in_child
from orchestrator.server.supervisor import Supervisor
from orchestrator.campaign_spec import CampaignSpec


@dataclass
class Service:
    config: ServiceConfig
    base_url: str  # how controllers reach the API (slot requests)
    mlflow_ui: str | None = None
    # Whether this service still holds its database's lock (database_lock.py).
    lock_held: Callable[[], bool] = lambda: True
    db: Database = field(init=False)
    slots: SlotPool = field(init=False)
    progress: ProgressCache = field(init=False)
    links: MlflowLinks = field(init=False)
    supervisor: Supervisor = field(init=False)
    # Held from a submission's quota check to its insert: SQLite has one writer, and on
    # PostgreSQL the quota rows are locked too (quotas.refusal).
    admission: threading.Lock = field(init=False, default_factory=threading.Lock)
    run_as: RunAs | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.config.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.config.runs_dir.mkdir(parents=True, exist_ok=True)
        self.run_as = RunAs.of(self.config.run_as) if self.config.run_as else None
        if self.run_as:
            isolate(self.run_as, self.config.state_dir, self.config.runs_dir,
                    [self.config.trial_workdir, self.config.spec_path("x").parent])
        else:
            self.config.trial_workdir.mkdir(exist_ok=True)
        self.db = Database(self.config.url)
        self.slots = SlotPool(self.db, self.config.max_trials)
        self.progress = ProgressCache(self.config.runs_dir)
        self.links = MlflowLinks(self.mlflow_ui)
        self.supervisor = Supervisor(self.db, self.config, self.slots, self.progress,
                                     self.base_url, self.lock_held, self.run_as)

    def parse(self, data: dict[str, Any], workdir: str | None, pinned_workdir: Path | None,
              notes: list[str]) -> CampaignSpec:
        """A submission's spec (submission.parse_submission), checked by a child process as
        the run-as user, or as ours where the spec names files (submission_as_user.py)."""
        if not (self.run_as or names_files(data)):
            return parse_submission(data, self.config.runs_dir, workdir,
                                    pinned_workdir=pinned_workdir, notes=notes)
        return parse_in_child(data, self.config.runs_dir, workdir, pinned_workdir, notes,
                              env=self.supervisor.controller_env(),
                              cwd=self.supervisor.controller_cwd(), run_as=self.run_as)

    def used_gpu_hours(self, row: Campaign) -> float:
        return self.progress.progress(row.name).gpu_hours

    def describe(self, row: Campaign) -> dict[str, Any]:
        """A campaign as the API shows it: the service's record and its journal's progress."""
        progress = self.progress.progress(row.name, row.max_trials).as_ended(row.state)
        return {
            "name": row.name, "owner": row.owner, "project": row.project,
            "priority": row.priority, "state": row.state, "reason": row.reason,
            "final": row.state in FINAL_STATES, "cancel_requested": row.cancel_requested,
            "submitted_at": row.submitted_at, "started_at": row.started_at,
            "ended_at": row.ended_at, "restarts": row.restarts,
            "controller_pid": row.controller_pid,
            **progress.to_dict(), "gpu_hours_budget": row.gpu_hours_budget,
            "simulated": bool(row.simulated),
            "report_url": f"/api/campaigns/{row.name}/report",
            "mlflow_url": self.links.link(progress.mlflow_uri, progress.experiment),
        }
