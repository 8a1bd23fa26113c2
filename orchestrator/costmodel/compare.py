"""The AMSP paper's comparison for one layout: AMSP's plan against MiCS, ZeRO++, ZeRO-1, ZeRO-3.

Each scheme is a point of AMSP's factor space on the layout's data-parallel mesh (AMSP §IV-B,
Table IV), run on DeepSpeed's engine for the baselines:
- AMSP: the planner's best factor set (amsp.py), recomputing the fewest layers that fit
  when the layout recomputes (InternEvo's checkpoint fraction, recompute.py); the DeepSpeed
  baselines recompute what the model's code checkpoints, every layer;
- MiCS: a node's devices as the shard group, or the fewest whole nodes whose shards fit
  (MiCS, arXiv 2205.00119, §3 partitions within the fastest links first; AMSP Table IV ran
  (8,1) for 7B and 13B and (8,2) for 30B);
- ZeRO++: ZeRO-3 with hpZ's secondary weight shard over a node (AMSP §VI-A: (8,1), no
  quantization); on one node it is ZeRO-3;
- ZeRO-1 and ZeRO-3 over the whole mesh.
Each is estimated three ways: as run end to end (the broadcast overlap off, AMSP §VI-A), with
every overlap its engine has (Table V's first column) and with none (its second).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator.costmodel.amsp import plan_sharding
from orchestrator.costmodel.estimate import CostModel, Estimate
from orchestrator.costmodel.recompute import fewest_recomputed_layers
from orchestrator.space import Layout, ShardingFactors, dp_mesh

SCHEMES = ("amsp", "mics", "zero++", "zero1", "zero3")


@dataclass(frozen=True)
class SchemeRow:
    scheme: str
    factors: ShardingFactors
    estimate: Estimate
    full_overlap: Estimate
    without_overlap: Estimate

    def to_dict(self) -> dict:
        e = self.estimate
        recompute = e.config.activation_checkpointing
        if e.config.recompute_num_layers is not None:
            recompute = f"{e.config.recompute_num_layers} layers"
        return {"scheme": self.scheme, "factors": self.factors.to_dict(), "fits": e.fits,
                "recompute": recompute,
                "memory_gb": e.memory_gb, "step_time_s": e.step_time_s, "mfu": e.mfu,
                "hfu": e.hfu, "mfu_full_overlap": self.full_overlap.mfu,
                "mfu_without_overlap": self.without_overlap.mfu,
                "tokens_per_s": e.tokens_per_s}


def mics_factors(cost: CostModel, base: Layout, s0dp: int, s1dp: int) -> ShardingFactors:
    """MiCS's group: a node's devices, or the fewest whole nodes whose shards fit."""
    groups = [s0dp * k for k in range(1, s1dp + 1) if s1dp % k == 0]
    for g in groups:
        factors = ShardingFactors.named("mics", s0dp, s1dp, group=g)
        if cost.estimate(dataclasses.replace(base, sharding=factors)).fits:
            return factors
    return ShardingFactors.named("mics", s0dp, s1dp, group=s0dp * s1dp)


def scheme_factors(cost: CostModel, base: Layout) -> dict[str, ShardingFactors]:
    s0dp, s1dp = dp_mesh(base.dp, base.tp, cost.gpus_per_node)
    out: dict[str, ShardingFactors] = {}
    plans = plan_sharding(cost, base)
    if plans:
        out["amsp"] = plans[0].factors
    out["mics"] = mics_factors(cost, base, s0dp, s1dp)
    out["zero++"] = (ShardingFactors.named("zero++", s0dp, s1dp, group=s0dp) if s1dp > 1
                     else ShardingFactors.named("zero3", s0dp, s1dp))
    out["zero1"] = ShardingFactors.named("zero1", s0dp, s1dp)
    out["zero3"] = ShardingFactors.named("zero3", s0dp, s1dp)
    return out


def compare_schemes(cost: CostModel, base: Layout) -> list[SchemeRow]:
    """One row per scheme for `base`'s layout (tp, pp, dp, micro-batching, recompute)."""
    base = dataclasses.replace(base, sharding=None, zero_stage=0)
    full = cost.with_coefficients(cost.coefficients.with_broadcast_overlap())
    bare = cost.with_coefficients(cost.coefficients.without_overlap())
    rows = []
    for scheme, factors in scheme_factors(cost, base).items():
        config = dataclasses.replace(base, sharding=factors)
        if scheme == "amsp":
            config = fewest_recomputed_layers(cost, config)
        rows.append(SchemeRow(scheme, factors, cost.estimate(config), full.estimate(config),
                              bare.estimate(config)))
    return rows
