"""What a search knows of which candidates fit in memory: the cost model's prediction per
candidate, the calibrated scale of the measured peaks, and the out-of-memory runs seen.

A candidate's chance to run (fit_verdict.fit_chance) is 1 where the scaled prediction is within
capacity and falls across the memory margin's risky band, so a layout the model puts just over
the limit is a candidate worth its discounted gain rather than pruned; the fastest layout is
often the one nearest the limit. An out-of-memory run rules out every candidate predicted to
need as much or more, and raises the scale by as much as that run shows the model
under-predicted (a layout the model said fits that did not).
"""

from __future__ import annotations

import numpy as np

from orchestrator.costmodel.fit_verdict import fit_chance
from orchestrator.costmodel.memory import GB, overflow_scale


class MemoryBelief:
    def __init__(self, used: np.ndarray, reserve: np.ndarray, capacity_gb: float,
                 margin: float):
        self.used, self.reserve = used, reserve  # bytes per device, one entry per candidate
        self.capacity_gb, self.margin = capacity_gb, margin
        self.oom_scale = 1.0  # the least scale that explains every out-of-memory run
        self._smallest_oom = np.inf  # the least predicted used bytes that ran out of memory

    def out_of_memory(self, i: int) -> None:
        """Candidate i ran out of memory."""
        used = max(float(self.used[i]), 1.0)
        self.oom_scale = max(self.oom_scale,
                             1.001 * overflow_scale(used, self.reserve[i], self.capacity_gb))
        self._smallest_oom = min(self._smallest_oom, used)

    def chance(self, scale: float) -> np.ndarray:
        """Each candidate's chance to run at the used-memory `scale`."""
        need = (self.used * scale + self.reserve) / GB / self.capacity_gb
        chance = fit_chance(need, self.margin)
        chance[self.used >= self._smallest_oom] = 0.0
        return chance
