"""A slice campaign's part of the report: the slice line `status` prints, and a chart of each
layout measured at the target beside what the slice said of it (its slice measurement times
the slices in the target, what perfect weak scaling would give, and the slice's prediction at
the target, which adds what the target's collectives cost)."""

from __future__ import annotations

import html
from typing import Any

from dashboards.report_tables import number
from orchestrator.common.objective import Objective
from orchestrator.record.budget import executed
from orchestrator.record.journal import TARGET, TrialRecord
from orchestrator.record.slice_prediction import predict_target
from orchestrator.record.slice_summary import slice_line, value_on_slice
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.slice_scale import slices_in_target


def slice_points(spec: CampaignSpec, records: list[TrialRecord], objective: Objective
                 ) -> list[dict[str, Any]]:
    """Each layout measured at the target: its slice measurement scaled to the target, the
    slice's prediction at the target and the target's measurement (None where there is none)."""
    if spec.scale.slice_nodes is None:
        return []
    ran = executed(records)
    on_slice = [r for r in ran if r.phase != TARGET]
    predicted = {p.config: p.value for p in predict_target(spec, on_slice, objective)}
    points = []
    for r in ran:
        if r.phase != TARGET:
            continue
        measured = value_on_slice(spec, on_slice, r.config, objective)
        points.append({"trial_id": r.trial_id, "key": r.config.key(),
                       "slice_scaled": (measured * slices_in_target(spec)
                                        if measured is not None else None),
                       "predicted": predicted.get(r.config),
                       "measured": objective.value(r.result)})
    return points


def slice_figure(points: list[dict[str, Any]], metric: str, go) -> Any:
    keys = [f"{p['trial_id']} {p['key']}" for p in points]
    fig = go.Figure()
    for name, field in (("on the slice × slices (ideal)", "slice_scaled"),
                        ("predicted at the target", "predicted"),
                        ("measured at the target", "measured")):
        fig.add_bar(name=name, x=keys, y=[p[field] for p in points])
    fig.update_layout(title="Slice to target: each layout measured at the target",
                      yaxis_title=metric, barmode="group")
    return fig


def slice_section(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return ""
    return f"<h2>Slice and target</h2><p>{html.escape(slice_line(summary, number))}</p>"
