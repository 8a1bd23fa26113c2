"""Multi-fidelity search by successive halving: screen every proposal with a few steps, then
re-measure (confirm) the best share of the screened ones with the full number of steps.

Screening and confirming trials are separate trials, each with its own id and phase; the
campaign's best is taken among confirmed trials once there is one (campaign.py).
"""

from __future__ import annotations

import math

from orchestrator.common.objective import Objective
from orchestrator.record.journal import CONFIRM, SCREEN, TrialRecord
from orchestrator.scheduling.proposals import LoopState, Proposal, ProposalSource
from orchestrator.space import Layout


def promotions(records: list[TrialRecord], fidelity, objective: Objective) -> list[Layout]:
    """Screened configs now in the top `keep_fraction` that have no confirming trial yet, best
    first. `fidelity` is the spec's `search.fidelity` section."""
    screened = objective.ranked((r for r in records if r.phase == SCREEN),
                                lambda r: objective.value(r.result))
    if len(screened) < fidelity.min_screened:
        return []
    keep = math.ceil(fidelity.keep_fraction * len(screened))
    confirmed = {r.config for r in records if r.phase == CONFIRM}
    return [r.config for r in screened[:keep] if r.config not in confirmed]


class HalvingPromotions(ProposalSource):
    """Confirming trials for screened layouts as they enter the top share."""

    def __init__(self, fidelity, objective: Objective):
        self.fidelity = fidelity
        self.objective = objective

    def propose(self, state: LoopState) -> Proposal | None:
        for config in promotions(list(state.records.values()), self.fidelity, self.objective):
            if state.is_new(config, CONFIRM):
                # It ran as a screen already: no need to ask the memory model again.
                return Proposal(config, CONFIRM, prune=False)
        return None
