"""Rank a space by the cost model: what `paratune plan` and `--dry-run` show.

Two planners: `throughput` ranks every candidate that fits by predicted tokens/s; `amsp` runs
the AMSP planner (amsp.py) on each distinct layout and ranks the layouts by step time. Either
ranks the `risky` candidates (over capacity within the memory model's margin: fit_verdict.py)
apart, by the same key: listed and measurable, never the planner's pick, so a ranking's best
and its figures are those of layouts the model says fit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from orchestrator.costmodel.amsp import Plan, rank_plans
from orchestrator.costmodel.estimate import CostModel, Estimate
from orchestrator.costmodel.fit_verdict import RISKY
from orchestrator.space import Layout


@dataclass(frozen=True)
class Ranking:
    planner: str
    candidates: int
    feasible: int
    top: list[Estimate]
    plan: Plan | None = None  # the AMSP plan, for the amsp planner
    # The top risky candidates, best first (module docstring), and how many there are.
    risky: list[Estimate] = field(default_factory=list)
    risky_count: int = 0

    @property
    def best(self) -> Estimate | None:
        return self.top[0] if self.top else None


def rank_by_throughput(
    cost: CostModel, candidates: list[Layout], top_k: int = 10
) -> Ranking:
    estimates = list(map(cost.estimate, candidates))
    fitting = sorted((e for e in estimates if e.fits), key=_by_throughput)
    risky = sorted(filter(_is_risky, estimates), key=_by_throughput)
    return Ranking("throughput", len(candidates), len(fitting), fitting[:top_k],
                   risky=risky[:top_k], risky_count=len(risky))


def _by_throughput(e: Estimate) -> tuple:
    return (-e.tokens_per_s, e.memory_gb)


def _is_risky(e: Estimate) -> bool:
    """Listed apart and measurable: over capacity within the margin, on a cluster that runs it."""
    return e.unsupported is None and e.memory_verdict == RISKY


def rank_amsp(cost: CostModel, candidates: list[Layout], top_k: int = 10) -> Ranking:
    """Group candidates by their layout without sharding; plan each group; best layout first."""
    groups: dict[Layout, list[Plan]] = {}
    risky = []
    for config in candidates:
        if config.sharding is None:
            continue
        est = cost.estimate(config)
        if est.fits:
            base = dataclasses.replace(config, sharding=None)
            groups.setdefault(base, []).append(Plan(config.sharding, est))
        elif _is_risky(est):
            risky.append(est)
    risky.sort(key=lambda e: e.step_time_s)
    ranked = [rank_plans(plans) for plans in groups.values()]
    ranked.sort(key=lambda plans: plans[0].estimate.step_time_s)
    feasible = sum(len(plans) for plans in ranked)
    if not ranked:
        return Ranking("amsp", len(candidates), 0, [], risky=risky[:top_k],
                       risky_count=len(risky))
    best_group = ranked[0]
    return Ranking(
        "amsp", len(candidates), feasible, [p.estimate for p in best_group[:top_k]],
        plan=best_group[0], risky=risky[:top_k], risky_count=len(risky),
    )
