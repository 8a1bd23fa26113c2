"""The read-only view of a campaign: its records, best trial, budget and calibration input,
read from its journal. The CLI, reports and the service read campaigns through it; nobody
builds a scheduler just to read results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.common.locks import controller_alive
from orchestrator.common.objective import Objective
from orchestrator.costmodel import Calibration, calibrate
from orchestrator.record.best import best_record
from orchestrator.record.budget import BudgetState, Tally, held_gpu_hours, reservation
from orchestrator.record.journal import (
    INCOMPLETE,
    SCALING,
    TARGET,
    Journal,
    TrialRecord,
    spec_digest,
)
from orchestrator.result import TrialResult
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec, load_campaign_spec
from orchestrator.campaign_spec.planning import cost_model_for
from orchestrator.trial.folder import TrialFolder

JOURNAL_FILE = "journal.jsonl"


def calibration_input(records: list[TrialRecord]) -> list[tuple[str, Layout, TrialResult]]:
    """What the cost model is refit on: every ended trial at the tuned scale (calibration keeps
    the ones that succeeded); a slice campaign's trials at its target are another scale."""
    return [(r.trial_id, r.config, r.result) for r in records
            if r.result is not None and r.phase not in (SCALING, TARGET)]


def not_in_mlflow(records: list[TrialRecord]) -> list[TrialRecord]:
    """Finished trials whose MLflow run is not journaled yet (MLflow was unreachable): their
    results are safe in the journal and reach MLflow when the campaign is resumed."""
    return [r for r in records if r.done and r.run_id is None and not r.pruned]


# What a trial with no result is called, by how its campaign stands (`CampaignView.phase`, or
# the service's state): running only while a controller runs the campaign.
UNFINISHED_LABEL = {"stopped": "unfinished", "finished": "unfinished", "failed": "unfinished",
                    "cancelled": "cancelled"}


def unfinished_label(state: str) -> str:
    return UNFINISHED_LABEL.get(state, "running")


@dataclass
class CampaignSummary:
    name: str
    records: list[TrialRecord]
    best: TrialRecord | None
    complete: bool = False
    stop_reason: str | None = None

    def counts(self, unfinished: str = "running") -> dict[str, int]:
        """Trials by status; `unfinished` names those with no result yet (running while a
        controller runs the campaign, else left unfinished or cancelled)."""
        counts: dict[str, int] = {}
        for record in self.records:
            status = record.result.status if record.result else unfinished
            counts[status] = counts.get(status, 0) + 1
        return counts


@dataclass
class CampaignView:
    spec: CampaignSpec
    dir: Path = field(init=False)
    journal: Journal = field(init=False)
    objective: Objective = field(init=False)

    def __post_init__(self) -> None:
        self.dir = self.spec.campaign_dir().resolve()
        self.journal = Journal(self.dir / JOURNAL_FILE, name=self.spec.name,
                               digest=spec_digest(self.spec))
        self.objective = Objective.of(self.spec.objective)

    @classmethod
    def open(cls, runs_dir: Path, name: str) -> "CampaignView":
        """The campaign saved under `runs_dir/name` (a one-line error if there is none)."""
        return cls(load_campaign_spec(runs_dir, name))

    def records(self) -> list[TrialRecord]:
        return sorted(self.journal.trials().values(), key=lambda r: r.trial_id)

    def best(self, records: list[TrialRecord] | None = None) -> TrialRecord | None:
        return best_record(self.records() if records is None else records, self.objective)

    def trial_dir(self, trial_id: str) -> Path:
        """Where a trial's files are (its log, its DeepSpeed config, its result)."""
        return TrialFolder.of(self.dir, trial_id).path

    def summary(self) -> CampaignSummary:
        records = self.records()
        return CampaignSummary(self.spec.name, records, self.best(records))

    def state(self) -> str:
        """finished | cancelled | incomplete (running, stopped or crashed: resumable)."""
        return self.journal.state()

    def phase(self) -> tuple[str, str | None]:
        """running | stopped (resumable) | finished | cancelled, and why a finished
        campaign's search stopped."""
        state, reason = self.journal.ending()
        if state == INCOMPLETE:
            return ("running" if controller_alive(self.dir) else "stopped"), None
        return state, reason

    def started_at(self) -> float:
        return self.journal.campaign_info().get("started_at") or time.time()

    def parent_run_id(self) -> str | None:
        """The campaign's MLflow run, once tracking has made one."""
        return self.journal.campaign_info().get("parent_run_id")

    def budget(self, records: list[TrialRecord] | None = None) -> BudgetState:
        records = self.records() if records is None else records
        tally = Tally.of(records, self.objective)
        return tally.state(self.spec.budget, self.started_at(),
                           reserved_gpu_hours=self._held_gpu_hours(records))

    def _held_gpu_hours(self, records: list[TrialRecord]) -> float:
        """What the trials submitted and not ended hold of budget.gpu_hours (budget.py) while
        the campaign has not ended: as its controller counts them while it runs; their
        reservations alone once it has stopped (its local trials may run on, and resume
        reserves again for those it runs again)."""
        unfinished = [r for r in records if r.submitted_at is not None and r.result is None]
        if self.spec.budget.gpu_hours is None or not unfinished:
            return 0.0
        phase, _ = self.phase()
        if phase not in ("running", "stopped"):
            return 0.0
        cost_model = cost_model_for(self.spec)
        held = [(r, reservation(self.spec, r, cost_model).gpu_hours) for r in unfinished]
        if phase == "stopped":
            return sum(reserved for _, reserved in held)
        return held_gpu_hours(held, time.time())

    def calibration(self, records: list[TrialRecord] | None = None) -> Calibration | None:
        """The cost model refit on the campaign's measured trials; None with too few."""
        records = self.records() if records is None else records
        return calibrate(cost_model_for(self.spec), calibration_input(records))
