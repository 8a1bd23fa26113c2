"""Grid search: every candidate of the space, in the space's fixed order."""

from __future__ import annotations

from orchestrator.search.base import CandidateListSearcher
from orchestrator.space import Layout


class GridSearcher(CandidateListSearcher):
    def __init__(self, candidates: list[Layout]):
        super().__init__(list(candidates))
