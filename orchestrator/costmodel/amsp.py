"""The AMSP planner: the sharding factors with the least communication that fit in memory.

AMSP (arXiv 2311.00257, §V-B) minimises T_comm = T_p + T_g + T_os0 + T_os1 over the six factors
subject to (2) memory ≤ device memory and (3)-(7) the ordering, divisibility and fill-a-node
rules. Like the paper's solver, this one enumerates every factor set that passes the filters
(a few hundred on 1,024 GPUs). It minimises the part of T_comm the overlap model leaves on the
critical path (AMSP overlaps T_os0 with the backward pass, §V-C, so its profiled planner in
effect weighs T_p and T_os1 over T_os0). Ties (within TIE_TOLERANCE of the step time) go to the
plan that shards least, which has fewer collectives and less bookkeeping.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator.costmodel.estimate import CostModel, Estimate
from orchestrator.space import Layout, ShardingFactors, dp_mesh
from orchestrator.space.search_space import amsp_factor_sets

TIE_TOLERANCE = 1e-3  # relative


@dataclass(frozen=True)
class Plan:
    factors: ShardingFactors
    estimate: Estimate

    @property
    def comm_s(self) -> float:
        """AMSP's T_comm: the four terms as they are, before overlap."""
        return self.estimate.time.dp_comm.total

    @property
    def exposed_comm_s(self) -> float:
        """T_comm left on the critical path by the overlap model: what the planner minimises."""
        return self.estimate.time.dp_exposed_s

    def to_dict(self) -> dict:
        return {**self.factors.to_dict(), "comm_s": self.comm_s,
                "exposed_comm_s": self.exposed_comm_s, **self.estimate.to_dict()}


def plan_sharding(cost: CostModel, base: Layout) -> list[Plan]:
    """Every feasible factor set for `base`'s layout, best first."""
    s0dp, s1dp = dp_mesh(base.dp, base.tp, cost.gpus_per_node)
    plans = []
    for factors in amsp_factor_sets(s0dp, s1dp):
        est = cost.estimate(dataclasses.replace(base, sharding=factors, zero_stage=0))
        if est.fits:
            plans.append(Plan(factors, est))
    return rank_plans(plans)


def rank_plans(plans: list[Plan]) -> list[Plan]:
    """Least communication first; near-ties to the least sharded plan."""
    if not plans:
        return []
    best = min(p.exposed_comm_s for p in plans)
    scale = max(min(p.estimate.step_time_s for p in plans), 1e-9)

    def key(p: Plan) -> tuple:
        bucket = round((p.exposed_comm_s - best) / (scale * TIE_TOLERANCE))
        return (bucket, p.factors.sp * p.factors.sg * p.factors.sos, p.factors.as_tuple())

    return sorted(plans, key=key)
