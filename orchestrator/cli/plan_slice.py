"""`plan` of a slice campaign (`scale.slice_nodes`): what its search trials run on the slice,
which of the ranked layouts the slice cannot hold (priced only, confirmed at the target if at
all), and what its trials should cost on the slice against the same trials at full scale."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.common import out
from orchestrator.costmodel import CostModel
from orchestrator.space import Layout
from orchestrator.space.rescaled import scaled_config
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.planning import fitted_candidates
from orchestrator.campaign_spec.slice_scale import slice_spec, slices_in_target


def slice_plan(spec: CampaignSpec, cost: CostModel, ranked: list[Layout]
               ) -> dict[str, Any] | None:
    """None for a campaign that runs at its target. `ranked`: the plan's layouts, best first;
    the trials' cost is the best layout's, times `budget.max_trials`."""
    if spec.scale.slice_nodes is None or not ranked:
        return None
    nodes, slice_nodes = spec.scale.nodes, spec.scale.slice_nodes
    on_slice = [scaled_config(c, nodes, slice_nodes, "weak") for c in ranked]
    steps = spec.trial.steps + spec.trial.warmup_steps
    trials = spec.budget.max_trials

    def hours(layout: Layout) -> float:
        return layout.world_size * steps * cost.estimate(layout).step_time_s / 3600

    # A trial's cost: the best layout the slice can run, and the same layout at the target.
    # A risky layout is measured as a campaign measures one (ZeRO shards the optimizer over
    # fewer replicas on a slice, so a layout that fits at the target may be risky there).
    runnable = [c for c in fitted_candidates(slice_spec(spec), cost)
                if not cost.estimate(c).prunable]
    first = max(runnable, key=lambda c: cost.estimate(c).tokens_per_s, default=None)
    at_slice = None if first is None else hours(first)
    at_target = None if first is None else hours(scaled_config(first, slice_nodes, nodes, "weak"))
    return {
        "slice_nodes": slice_nodes, "target_nodes": nodes, "slices": slices_in_target(spec),
        "global_batch_size_on_slice": spec.scale.global_batch_size // slices_in_target(spec),
        "first_on_slice": on_slice[0] and on_slice[0].key(),
        "not_on_slice": sum(c is None for c in on_slice), "ranked": len(ranked),
        "best_runnable_on_slice": first and first.key(), "trials": trials,
        "runnable_on_slice": len(runnable),
        "risky_on_slice": sum(not cost.estimate(c).fits for c in runnable),
        "trial_gpu_hours_on_slice": at_slice, "trial_gpu_hours_at_target": at_target,
        "tuning_gpu_hours_on_slices": at_slice and at_slice * trials,
        "tuning_gpu_hours_at_full_scale": at_target and at_target * trials,
        "confirm_gpu_hours": spec.budget.confirm_gpu_hours,
    }


def print_slice_plan(s: dict[str, Any] | None) -> None:
    if s is None:
        return
    lines = [f"slice: each search trial runs on {s['slice_nodes']} of the target's "
             f"{s['target_nodes']} nodes with each GPU's work kept (1/{s['slices']} of the "
             f"replicas, a global batch of {s['global_batch_size_on_slice']:,})"]
    if s["first_on_slice"] is not None:
        lines.append(f"  the first layout on the slice: {s['first_on_slice']}")
    if s["not_on_slice"]:
        lines.append(f"  {s['not_on_slice']} of the {s['ranked']} layouts listed cannot run "
                     "on the slice (a model-parallel group larger than it, or replicas it "
                     "does not divide): priced only, measured at the target if at all")
    if s["risky_on_slice"]:
        lines.append(f"  {s['risky_on_slice']} of the {s['runnable_on_slice']} layouts the "
                     "slice can run are risky there (ZeRO shards over fewer replicas on a "
                     "slice): each is measured with its chance of running out of memory")
    if s["tuning_gpu_hours_on_slices"] is None:
        lines.append("  no layout of the space runs on the slice: choose more slice_nodes")
    else:
        confirm = s["confirm_gpu_hours"]
        lines.append(
            f"  {s['trials']} trials like {s['best_runnable_on_slice']}: about "
            f"{s['tuning_gpu_hours_on_slices']:,.0f} GPU-hours on slices, against "
            f"{s['tuning_gpu_hours_at_full_scale']:,.0f} at full scale; then at the target "
            + (f"up to {confirm:,.0f} GPU-hours (budget.confirm_gpu_hours)" if confirm
               else f"one trial, about {s['trial_gpu_hours_at_target']:,.0f} GPU-hours"))
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
