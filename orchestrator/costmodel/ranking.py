"""Rank a space by the cost model: what `paratune plan` and `--dry-run` show.

Two planners: `throughput` ranks every candidate that fits by predicted tokens/s; `amsp` runs
the AMSP planner (amsp.py) on each distinct layout and ranks the layouts by step time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator.costmodel.amsp import Plan, rank_plans
from orchestrator.costmodel.estimate import CostModel, Estimate
from orchestrator.space import ParallelConfig


@dataclass(frozen=True)
class Ranking:
    planner: str
    candidates: int
    feasible: int
    top: list[Estimate]
    plan: Plan | None = None  # the AMSP plan, for the amsp planner

    @property
    def best(self) -> Estimate | None:
        return self.top[0] if self.top else None


def rank_by_throughput(
    cost: CostModel, candidates: list[ParallelConfig], top_k: int = 10
) -> Ranking:
    fitting = [e for e in map(cost.estimate, candidates) if e.fits]
    fitting.sort(key=lambda e: (-e.tokens_per_s, e.memory_gb))
    return Ranking("throughput", len(candidates), len(fitting), fitting[:top_k])


def rank_amsp(cost: CostModel, candidates: list[ParallelConfig], top_k: int = 10) -> Ranking:
    """Group candidates by their layout without sharding; plan each group; best layout first."""
    groups: dict[ParallelConfig, list[Plan]] = {}
    for config in candidates:
        est = cost.estimate(config)
        if est.fits and config.sharding is not None:
            base = dataclasses.replace(config, sharding=None)
            groups.setdefault(base, []).append(Plan(config.sharding, est))
    ranked = [rank_plans(plans) for plans in groups.values()]
    ranked.sort(key=lambda plans: plans[0].estimate.step_time_s)
    feasible = sum(len(plans) for plans in ranked)
    if not ranked:
        return Ranking("amsp", len(candidates), 0, [])
    best_group = ranked[0]
    return Ranking(
        "amsp", len(candidates), feasible, [p.estimate for p in best_group[:top_k]],
        plan=best_group[0],
    )
