"""What a campaign's trials hold of its `budget.gpu_hours` (record/budget.py has the rule): each
trial's reservation, reckoned once, and whether the next one fits beside those running."""

from __future__ import annotations

import time
from collections.abc import Iterable

from orchestrator.record.budget import Reservation, Tally, held_gpu_hours, reservation
from orchestrator.record.journal import TrialRecord
from orchestrator.scheduling.live_cost_model import LiveCostModel
from orchestrator.campaign_spec import CampaignSpec


class Reservations:
    def __init__(self, spec: CampaignSpec, model: LiveCostModel):
        self.spec = spec
        self.model = model  # its current (calibrated) fit predicts a simulated trial's time
        self._by_trial: dict[str, Reservation] = {}

    def of(self, record: TrialRecord) -> Reservation:
        if record.trial_id not in self._by_trial:
            self._by_trial[record.trial_id] = reservation(self.spec, record, self.model.current)
        return self._by_trial[record.trial_id]

    def refusal(self, record: TrialRecord, running: Iterable[TrialRecord],
                starting: Iterable[TrialRecord], tally: Tally, started_at: float) -> str | None:
        """Why `record` may not start now: its reservation does not fit beside what has been
        used, what the `running` trials hold and what those `starting` with it reserve (a
        resumed trial about to run again holds nothing yet, whenever it first ran); None if
        it fits."""
        if self.spec.budget.gpu_hours is None:
            return None
        held = held_gpu_hours(((r, self.of(r).gpu_hours) for r in running), time.time())
        held += sum(self.of(r).gpu_hours for r in starting)
        budget = tally.state(self.spec.budget, started_at, reserved_gpu_hours=held)
        return budget.refusal(record.trial_id, self.of(record))

    def settled(self, trial_id: str) -> None:
        """The trial has ended (or will not run): what it used counts instead."""
        self._by_trial.pop(trial_id, None)

    def clear(self) -> None:
        self._by_trial.clear()
