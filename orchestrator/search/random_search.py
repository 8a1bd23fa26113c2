"""Random search: candidates drawn without replacement, reproducible from a seed."""

from __future__ import annotations

import random

from orchestrator.search.base import CandidateListSearcher
from orchestrator.space import Layout


class RandomSearcher(CandidateListSearcher):
    def __init__(self, candidates: list[Layout], seed: int = 0):
        order = list(candidates)
        random.Random(seed).shuffle(order)
        super().__init__(order)
