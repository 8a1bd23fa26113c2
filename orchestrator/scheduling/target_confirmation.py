"""A slice campaign's confirmation at its target: once the search on the slice is over, the
layouts the prediction ranks best (record/slice_prediction.py), of those it may confirm (ran on
the slice, or too large for it and sure to fit), are measured at the full
target scale, in that order, while their predicted GPU-hours fit in
`budget.confirm_gpu_hours` (left out: the first one only). The campaign's best is then the
best measured at the target (record/best.py)."""

from __future__ import annotations

from orchestrator.common.objective import Objective
from orchestrator.record.budget import gpu_hours
from orchestrator.record.journal import TARGET, TrialRecord
from orchestrator.record.slice_prediction import TargetPrediction, predict_target
from orchestrator.scheduling.proposals import LoopState, Proposal, ProposalSource, SearchProposals
from orchestrator.spec import CampaignSpec


class TargetConfirmation(ProposalSource):
    budgeted = False  # outside the search's trial budget, within its own GPU-hours

    def __init__(self, spec: CampaignSpec, objective: Objective, after: SearchProposals):
        self.spec = spec
        self.objective = objective
        self.after = after
        self._queue: list[TargetPrediction] | None = None  # made once the search is over
        self.budget_line: str | None = None  # why it stopped before the ranking's end

    def outcome(self, records: list[TrialRecord]) -> str:
        """How the confirmation ended, to follow the search's reason in the campaign's."""
        target = [r for r in records if r.phase == TARGET and r.result is not None]
        spent = sum(gpu_hours(r) for r in target)
        ok = sum(1 for r in target if r.result.ok)
        said = (f"{len(target)} layout(s) measured at the target ({ok} ran), "
                f"{spent:,.0f} GPU-hours")
        if not ok:
            said = "no layout confirmed at the target: the best is the slice's, unconfirmed; " + said
        return f"{said}; {self.budget_line}" if self.budget_line else said

    def propose(self, state: LoopState) -> Proposal | None:
        if state.busy or not (self.after.exhausted or self.after.held_back or state.stop_reason):
            return None
        records = list(state.records.values())
        if self._queue is None:
            predictions = [p for p in predict_target(self.spec, records, self.objective)
                           if p.confirmable]
            limit = self.spec.budget.confirm_gpu_hours
            self._queue = predictions if limit is not None else predictions[:1]
        spent = sum(gpu_hours(r) for r in records if r.phase == TARGET)
        limit = self.spec.budget.confirm_gpu_hours
        while self._queue:
            head = self._queue[0]
            if not state.is_new(head.config, TARGET):
                self._queue.pop(0)
                continue
            if limit is not None and spent + head.gpu_hours > limit:
                self.budget_line = (
                    f"budget.confirm_gpu_hours: {spent:,.0f} of {limit:,.0f} GPU-hours spent at "
                    f"the target; the next layout ranked, {head.config.key()}, would take "
                    f"{head.gpu_hours:,.0f} more")
                self._queue = []
                return None
            self._queue.pop(0)
            return Proposal(head.config, TARGET)
        return None
