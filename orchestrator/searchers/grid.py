"""Grid search: every candidate of the space, in the space's fixed order."""

from __future__ import annotations

from orchestrator.search_spaces import ParallelConfig
from orchestrator.searchers.base import CandidateListSearcher


class GridSearcher(CandidateListSearcher):
    def __init__(self, candidates: list[ParallelConfig]):
        super().__init__(list(candidates))
