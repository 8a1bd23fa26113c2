"""The cost model's constants that no measurement checks yet, and whether a ranking rests on them.

`overlap_expert_comm` (coefficients.py) is the share of a step's compute that hides the MoE
dispatch when the trainer overlaps it: 0.6 by analogy with gradient reduction, with no
measured row behind it. Its plausible range is 0 (nothing hides) to 1 (compute hides as much
of the dispatch as it lasts), and across it DeepSeek-V3's published layout moves from 28% to
47% MFU. Context parallelism has no such constant: its p2p exchange overlaps the attention of
the block in hand, which the model computes (context_parallel.py).

A ranking rests on a constant when re-estimating its listed layouts at either end of the
range puts another one first, or moves a listed layout's gap to the pick by more than
`GAP_MOVE` (the published layout DeepSeek ran stays behind the pick over the whole range,
but how far behind is the constant's, not a measurement's).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.common.objective import Objective
from orchestrator.costmodel.estimate import CostModel, Estimate

# name -> its plausible range (module docstring)
UNVALIDATED = {"overlap_expert_comm": (0.0, 1.0)}
# A gap to the pick that moves by more than this over a constant's range rests on it: the
# validation's median step-time error on the check sources is of this order
# (docs/validation.md), so a smaller move is within what the model is known to miss anyway.
GAP_MOVE = 0.05


@dataclass(frozen=True)
class GapMove:
    """How far one listed layout trails the pick (its predicted objective against the pick's,
    as a fraction) at the range's low end, at the model's value and at the high end."""
    index: int
    at_low: float
    at_value: float
    at_high: float

    @property
    def spread(self) -> float:
        return max(self.at_low, self.at_value, self.at_high) - min(
            self.at_low, self.at_value, self.at_high)


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
    # The listed layouts whose gap to the pick moves by more than GAP_MOVE, widest first.
    gaps: tuple[GapMove, ...] = ()

    def to_dict(self) -> dict:
        ends = (f"{self.low:g}", f"{self.high:g}")
        return {"constant": self.constant, "value": self.value, "range": [self.low, self.high],
                "first_at": dict(zip(ends, (self.first_at_low + 1, self.first_at_high + 1))),
                "mfu_of_first_at": dict(zip(ends, (self.estimate_at_low.mfu,
                                                   self.estimate_at_high.mfu))),
                "gaps_moved": [{"layout": g.index + 1, "behind_pick": dict(zip(
                    (ends[0], f"{self.value:g}", ends[1]), (g.at_low, g.at_value, g.at_high)))}
                    for g in self.gaps]}


def rests_on_unvalidated(cost: CostModel, listed: list[Estimate], objective: Objective
                         ) -> list[RestsOn]:
    """Each unvalidated constant at whose range's ends another of `listed` (best first, the
    pick first) would be ranked first."""
    found = []
    for name, (low, high) in UNVALIDATED.items():
        at_low, at_high = (_estimates_with(cost, name, end, listed) for end in (low, high))
        i_low, i_high = (_first(objective, again) for again in (at_low, at_high))
        behind = [_behind_pick(objective, again) for again in (at_low, listed, at_high)]
        gaps = sorted((GapMove(i, *(b[i] for b in behind)) for i in range(1, len(listed))),
                      key=lambda g: -g.spread)
        gaps = tuple(g for g in gaps if g.spread > GAP_MOVE)
        if i_low or i_high or gaps:
            found.append(RestsOn(name, getattr(cost.coefficients, name), low, high,
                                 i_low, i_high, at_low[i_low], at_high[i_high], gaps))
    return found


def _estimates_with(cost: CostModel, name: str, value: float, listed: list[Estimate]
                    ) -> list[Estimate]:
    """The listed layouts re-estimated with the constant at `value`."""
    varied = cost.with_coefficients(cost.coefficients.with_(**{name: value}))
    return [varied.estimate(e.config) for e in listed]


def _first(objective: Objective, estimates: list[Estimate]) -> int:
    ranked = objective.ranked(range(len(estimates)),
                              lambda i: objective.predicted(estimates[i]))
    return ranked[0] if ranked else 0


def _behind_pick(objective: Objective, estimates: list[Estimate]) -> list[float]:
    """How far each layout trails the listed pick (the first), as a fraction of the pick's
    predicted objective: positive when it is worse."""
    pick = objective.predicted(estimates[0])
    sign = 1.0 if objective.maximise else -1.0
    return [sign * (pick - objective.predicted(e)) / abs(pick) if pick else 0.0
            for e in estimates]
