"""What a slice campaign has to show at a glance (`status`, the report, the service): its
slice, and for its layout (the best measured at the target once one was, else the best of the
slice's moved to the target) what it measured on the slice, what the slice predicted for it
at the target and what it measured there; then its GPU-hours beside an estimate of what the
same trials would have cost at the full target scale (each slice trial's GPU-hours times the
slices in the target: the same work per GPU for about as long, on that many times the GPUs)."""

from __future__ import annotations

import statistics
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.record.best import best_record
from orchestrator.record.budget import executed, gpu_hours
from orchestrator.record.journal import TARGET, TrialRecord
from orchestrator.record.slice_prediction import predict_target
from orchestrator.space import Layout
from orchestrator.space.rescaled import scaled_config
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.slice_scale import slices_in_target


def slice_summary(spec: CampaignSpec, records: list[TrialRecord], objective: Objective
                  ) -> dict[str, Any] | None:
    """None for a campaign that runs at its target."""
    if spec.scale.slice_nodes is None:
        return None
    ran = executed(records)
    on_slice = [r for r in ran if r.phase != TARGET]
    confirmed = best_record([r for r in ran if r.phase == TARGET], objective)
    best_slice = best_record(on_slice, objective)
    nodes, slice_nodes = spec.scale.nodes, spec.scale.slice_nodes
    layout = confirmed.config if confirmed else (
        best_slice and scaled_config(best_slice.config, slice_nodes, nodes, "weak"))
    found: dict[str, Any] = {"metric": objective.metric, "slice_nodes": slice_nodes,
                             "target_nodes": nodes, "layout": layout and layout.key()}
    if layout is not None:
        predicted = {p.config: p.value for p in predict_target(spec, on_slice, objective)}
        found.update(on_slice=value_on_slice(spec, on_slice, layout, objective),
                     predicted_at_target=predicted.get(layout),
                     measured_at_target=confirmed and objective.value(confirmed.result),
                     trial_id=confirmed.trial_id if confirmed else None)
    slice_hours = sum(gpu_hours(r) for r in on_slice)
    found.update(gpu_hours_on_slice=slice_hours,
                 gpu_hours_at_target=sum(gpu_hours(r) for r in ran if r.phase == TARGET),
                 gpu_hours_same_trials_at_full_scale=slice_hours * slices_in_target(spec))
    return found


def value_on_slice(spec: CampaignSpec, on_slice: list[TrialRecord], layout: Layout,
                   objective: Objective) -> float | None:
    """The mean of what a target layout's slice image measured on the slice; None if it was
    not measured there."""
    image = scaled_config(layout, spec.scale.nodes, spec.scale.slice_nodes, "weak")
    values = [v for r in on_slice if r.config == image
              if (v := objective.value(r.result)) is not None]
    return statistics.fmean(values) if values else None


def slice_line(s: dict[str, Any], number) -> str:
    """The summary as one line; `number` formats the metric's values."""

    def value(key: str) -> str:
        return "not measured" if s.get(key) is None else number(s[key])

    head = f"slice of {s['slice_nodes']} of {s['target_nodes']} nodes"
    if s["layout"] is not None:
        head += (f"; {s['layout']}: {s['metric']} {value('on_slice')} on the slice, "
                 f"{value('predicted_at_target')} predicted at the target, "
                 f"{value('measured_at_target')} measured there"
                 + (f" ({s['trial_id']})" if s.get("trial_id") else ""))
    return (f"{head}; {s['gpu_hours_on_slice']:,.0f} GPU-hours on the slice + "
            f"{s['gpu_hours_at_target']:,.0f} at the target, against about "
            f"{s['gpu_hours_same_trials_at_full_scale']:,.0f} for the slice's trials at full "
            "scale")


def layout_for_target(spec: CampaignSpec, best: TrialRecord
                      ) -> tuple[Layout, str | None]:
    """The layout a production run at the target takes from the campaign's best, with a line
    to say where it was not measured there: a slice campaign's best measured on the slice only
    is moved to the target (its replicas and batch scaled up, each GPU's work kept)."""
    if spec.scale.slice_nodes is None or best.phase == TARGET:
        return best.config, None
    moved = scaled_config(best.config, spec.scale.slice_nodes, spec.scale.nodes, "weak")
    if moved is None:
        return best.config, (f"note: campaign {spec.name!r} measured {best.trial_id} on a slice "
                             "only, and its layout does not move to the target; this file runs "
                             "it on the slice")
    return moved, (f"note: campaign {spec.name!r} measured {best.trial_id} on a slice of "
                   f"{spec.scale.slice_nodes} nodes only; this file runs its layout at the "
                   f"target's {spec.scale.nodes} nodes ({moved.key()}), unconfirmed there")
