"""What `paratune plan` says beside its ranking about how far to read it: where the order of the
listed layouts rests on a constant no measurement checks (costmodel/unvalidated.py), and which
peak MFU and HFU are against (the dense 16-bit one, FP8 layouts included).
"""

from __future__ import annotations

from orchestrator.cli.common import out, print_ranking
from orchestrator.cli.layout_table import best_first
from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel
from orchestrator.costmodel.precision import is_fp8
from orchestrator.costmodel.ranking import Ranking
from orchestrator.costmodel.unvalidated import GAP_MOVE, RestsOn, rests_on_unvalidated
from orchestrator.presets import Cluster
from orchestrator.campaign_spec import CampaignSpec


def mfu_peak(cluster: Cluster) -> str:
    """The precision of the peak MFU is against: the preset's `peak_tflops`, the dense 16-bit
    rate (FP16 on V100s, which have no BF16 cores), or FP32 on CPUs."""
    if cluster.device == "cpu":
        return "fp32"
    return "fp16" if "V100" in cluster.device else "bf16"


def plan_caveats(spec: CampaignSpec, cost: CostModel, ranking: Ranking) -> dict:
    """The JSON's `mfu_peak` and `caveats` (each a constant the ranking rests on, with its
    sentence); the layouts are numbered as the table lists them."""
    objective = Objective.of(spec.objective)
    listed = best_first(objective, ranking.top, objective.predicted)
    found = rests_on_unvalidated(cost, listed, objective) if len(listed) > 1 else []
    return {"mfu_peak": mfu_peak(spec.cluster),
            "caveats": [{**r.to_dict(), "text": _sentence(r)} for r in found]}


def print_plan(spec: CampaignSpec, ranking: Ranking, caveats: dict) -> None:
    """The ranking's table, then a line per caveat, and which peak MFU is against when an FP8
    layout is listed (its MFU is not against the FP8 peak it computes at)."""
    print_ranking(spec, ranking)
    for caveat in caveats["caveats"]:
        out.print(f"caveat: {caveat['text']}", markup=False, highlight=False)
    cluster = spec.cluster
    if any(is_fp8(e.config) for e in [*ranking.top, *ranking.risky]):
        out.print(f"MFU and HFU are against the {caveats['mfu_peak'].upper()} dense peak "
                  f"({cluster.peak_tflops:g} TFLOPS per GPU), FP8 layouts too (FP8 peak "
                  f"{cluster.fp8_peak_tflops:g})", markup=False, highlight=False)
    elif ranking.top or ranking.risky:
        out.print(f"MFU vs {cluster.peak_tflops:g} TFLOPS {caveats['mfu_peak'].upper()} dense "
                  f"peak per GPU ({cluster.device})", markup=False, highlight=False)


def _sentence(found: RestsOn) -> str:
    low, high = found.first_at_low + 1, found.first_at_high + 1
    said = (f"rests on the unvalidated constant {found.constant} (value {found.value:g}, "
            f"plausible {found.low:g} to {found.high:g})")
    parts = []
    if low != 1 or high != 1:
        others = " and ".join(f"#{n}" for n in sorted({low, high} - {1}))
        parts.append(f"the gap between the pick (#1) and {others} {said}: at {found.low:g} the "
                     f"pick is #{low} (MFU {found.estimate_at_low.mfu:.1%}), at {found.high:g} "
                     f"it is #{high} (MFU {found.estimate_at_high.mfu:.1%})")
    if found.gaps:
        widest = found.gaps[0]
        moved = ", ".join(f"#{g.index + 1}" for g in found.gaps)
        which = f"the gaps to the pick of {moved}"
        lead = (f"{which} move by more than {GAP_MOVE:.0%} over that range" if parts else
                f"{which} rest on the unvalidated constant {found.constant} (value "
                f"{found.value:g}, plausible {found.low:g} to {found.high:g}): they move by "
                f"more than {GAP_MOVE:.0%} over that range")
        parts.append(f"{lead}; #{widest.index + 1} is {widest.at_low:.1%} behind at "
                     f"{found.low:g}, {widest.at_value:.1%} at {found.value:g}, "
                     f"{widest.at_high:.1%} at {found.high:g}")
    return "; ".join(parts)
