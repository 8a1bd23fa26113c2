"""Grid search: every candidate of the space, in the space's fixed order."""

from __future__ import annotations

from orchestrator.search.base import CandidateListSearcher
from orchestrator.space import ParallelConfig


class GridSearcher(CandidateListSearcher):
    def __init__(self, candidates: list[ParallelConfig]):
        super().__init__(list(candidates))
