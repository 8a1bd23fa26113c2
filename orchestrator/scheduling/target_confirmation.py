"""A slice campaign's confirmation at its target: once the search on the slice is over,
layouts are measured at the full target scale one at a time, each the one whose predicted
value at the target (record/slice_prediction.py: the slice's calibration and what its
measurements showed of each layout's neighbours, corrected by what the target trials so far
showed of its data-parallel collectives) is best by one standard deviation of that prediction,
of those it may risk there (ran on the slice, or sure to fit). It stops once no layout left
could beat the best measured at the target by that much, or when the next one's predicted
GPU-hours no longer fit in `budget.confirm_gpu_hours` (left out: the first layout only). The
campaign's best is then the best measured at the target (record/best.py)."""

from __future__ import annotations

from orchestrator.common.objective import Objective
from orchestrator.record.budget import gpu_hours
from orchestrator.record.journal import TARGET, TrialRecord
from orchestrator.record.slice_prediction import predict_target
from orchestrator.scheduling.proposals import LoopState, Proposal, ProposalSource, SearchProposals
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.planning import fitted_candidates


class TargetConfirmation(ProposalSource):
    budgeted = False  # outside the search's trial budget, within its own GPU-hours

    def __init__(self, spec: CampaignSpec, objective: Objective, after: SearchProposals):
        self.spec = spec
        self.objective = objective
        self.after = after
        self._candidates: list[Layout] | None = None  # the target's, made once
        self.ended: str | None = None  # why it confirms no more, once it does not

    def outcome(self, records: list[TrialRecord]) -> str:
        """How the confirmation ended, to follow the search's reason in the campaign's."""
        target = [r for r in records if r.phase == TARGET and r.result is not None]
        ok = sum(1 for r in target if r.result.ok)
        said = (f"{len(target)} layout(s) measured at the target ({ok} ran), "
                f"{sum(gpu_hours(r) for r in target):,.0f} GPU-hours")
        if not ok:
            said = "no layout confirmed at the target: the best is the slice's, unconfirmed; " + said
        return f"{said}; {self.ended}" if self.ended else said

    def propose(self, state: LoopState) -> Proposal | None:
        if (self.ended or state.busy
                or not (self.after.exhausted or self.after.held_back or state.stop_reason)):
            return None
        records = list(state.records.values())
        target = [r for r in records if r.phase == TARGET]
        limit = self.spec.budget.confirm_gpu_hours
        if limit is None and target:
            self.ended = "budget.confirm_gpu_hours not set: the first layout ranked only"
            return None
        if self._candidates is None:
            self._candidates = fitted_candidates(self.spec)
        ranked = [p for p in predict_target(self.spec, records, self.objective, self._candidates)
                  if p.confirmable and state.is_new(p.config, TARGET)]
        if not ranked:
            self.ended = "every layout the prediction may risk was measured at the target"
            return None
        head = self.objective.ranked(ranked, lambda p: p.upper)[0]
        measured = self.objective.best([r for r in target if self.objective.value(r.result)],
                                       lambda r: self.objective.value(r.result))
        if measured is not None and not self.objective.better(
                head.upper, self.objective.value(measured.result)):
            self.ended = (f"no layout left could beat {measured.config.key()}, the best "
                          "measured at the target, by the prediction's uncertainty")
            return None
        spent = sum(gpu_hours(r) for r in target)
        if limit is not None and spent + head.gpu_hours > limit:
            self.ended = (f"budget.confirm_gpu_hours: {spent:,.0f} of {limit:,.0f} GPU-hours "
                          f"spent at the target; the next layout, {head.config.key()}, would "
                          f"take {head.gpu_hours:,.0f} more")
            return None
        return Proposal(head.config, TARGET)
