"""Scaling studies: the campaign's best layout re-run at other node counts, and its efficiency
computed as in the Frontier paper (Dash et al., arXiv 2312.12705):

- weak scaling keeps the work per GPU (dp and the global batch grow with the nodes);
  efficiency = throughput per GPU at N nodes / throughput per GPU at the smallest count;
- strong scaling keeps the global batch (fewer accumulation steps as dp grows);
  efficiency = speed-up over the smallest count / ideal speed-up (the ratio of node counts).

The study is a proposal source: once the search is over and its trials have ended, it
proposes the best layout at each node count, outside the search's trial budget (each trial
still reserves its share of `budget.gpu_hours` first).
"""

from __future__ import annotations

from orchestrator.common.objective import Objective
from orchestrator.record.best import best_record
from orchestrator.record.journal import SCALING, TrialRecord
from orchestrator.scheduling.proposals import LoopState, Proposal, ProposalSource, SearchProposals
from orchestrator.space import Layout
from orchestrator.space.rescaled import scaled_config


class ScalingStudy(ProposalSource):
    """The best layout at each node count of `scale.study_nodes` not measured yet."""

    budgeted = False

    def __init__(self, scale, objective: Objective, after: SearchProposals):
        self.scale = scale  # the spec's `scale` section
        self.objective = objective
        self.after = after
        self._queue: list[Layout] | None = None  # made once the search is over

    def propose(self, state: LoopState) -> Proposal | None:
        if state.busy or not (self.after.exhausted or self.after.held_back or state.stop_reason):
            return None
        if self._queue is None:
            self._queue = self._plan(list(state.records.values()))
        while self._queue:
            config = self._queue.pop(0)
            if state.is_new(config, SCALING):
                return Proposal(config, SCALING)
        return None

    def _plan(self, records: list[TrialRecord]) -> list[Layout]:
        best = best_record(records, self.objective)
        if best is None:
            return []
        done = {r.config.world_size for r in records if r.phase == SCALING}
        planned = []
        for nodes in sorted(set(self.scale.study_nodes)):
            config = scaled_config(best.config, self.scale.nodes, nodes, self.scale.study)
            if config is not None and config.world_size not in done:
                planned.append(config)
        return planned
