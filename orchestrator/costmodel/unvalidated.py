"""The cost model's constants that no measurement checks yet, and whether a ranking rests on them.

`overlap_expert_comm` (coefficients.py) is the share of a step's compute that hides the MoE
dispatch when the trainer overlaps it: 0.6 by analogy with gradient reduction, with no
measured row behind it. Its plausible range is 0 (nothing hides) to 1 (compute hides as much
of the dispatch as it lasts), and across it DeepSeek-V3's published layout moves from 28% to
47% MFU. Context parallelism has no such constant: its p2p exchange overlaps the attention of
the block in hand, which the model computes (context_parallel.py).

A ranking rests on a constant when re-estimating its listed layouts at either end of the
range puts another one first: the gap between the pick and that layout is the constant's,
not a measurement's.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.common.objective import Objective
from orchestrator.costmodel.estimate import CostModel, Estimate

# name -> its plausible range (module docstring)
UNVALIDATED = {"overlap_expert_comm": (0.0, 1.0)}


@dataclass(frozen=True)
class RestsOn:
    constant: str
    value: float  # the model's value
    low: float
    high: float
    # Which of the listed layouts is ranked first at `low` and at `high` (an index into them),
    # and its estimate there.
    first_at_low: int
    first_at_high: int
    estimate_at_low: Estimate
    estimate_at_high: Estimate

    def to_dict(self) -> dict:
        ends = (f"{self.low:g}", f"{self.high:g}")
        return {"constant": self.constant, "value": self.value, "range": [self.low, self.high],
                "first_at": dict(zip(ends, (self.first_at_low + 1, self.first_at_high + 1))),
                "mfu_of_first_at": dict(zip(ends, (self.estimate_at_low.mfu,
                                                   self.estimate_at_high.mfu)))}


def rests_on_unvalidated(cost: CostModel, listed: list[Estimate], objective: Objective
                         ) -> list[RestsOn]:
    """Each unvalidated constant at whose range's ends another of `listed` (best first, the
    pick first) would be ranked first."""
    found = []
    for name, (low, high) in UNVALIDATED.items():
        (i_low, e_low), (i_high, e_high) = (_first_with(cost, name, end, listed, objective)
                                            for end in (low, high))
        if i_low or i_high:
            found.append(RestsOn(name, getattr(cost.coefficients, name), low, high,
                                 i_low, i_high, e_low, e_high))
    return found


def _first_with(cost: CostModel, name: str, value: float, listed: list[Estimate],
                objective: Objective) -> tuple[int, Estimate]:
    """The listed layout ranked first with the constant at `value`, and its estimate there."""
    varied = cost.with_coefficients(cost.coefficients.with_(**{name: value}))
    again = [varied.estimate(e.config) for e in listed]
    ranked = objective.ranked(range(len(again)), lambda i: objective.predicted(again[i]))
    first = ranked[0] if ranked else 0
    return first, again[first]
