"""`paratune report`: one self-contained HTML file (plotly.js inlined, no network needed) with
what a campaign found: the answer first (report_answer.py: the winner, its gain over the median
and the worst layout measured, the GPU-hours spent, how far to trust the cost model), the
winner's launch command folded, a warning when the calibrated cost model's ranking is weak, the winner against the runner-up by step-time
component, every trial in one table, convergence, knobs against throughput, predicted against
measured, predicted and measured memory of the top layouts, failures by reason and, when the
campaign ran one, its scaling study, or a slice campaign's slice against its target.

The page is built from plain data (`ReportData`, assembled by report_data.py from the
campaign's view and cost model), so this module needs neither.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dashboards.report_answer import answer_section
from dashboards.report_slice import slice_figure, slice_section
from dashboards.report_tables import (
    breakdown_section,
    calibration_section,
    number,
    table,
    trial_table,
)

KNOBS = ("tp", "pp", "dp", "zero_stage", "micro_batch_size", "grad_accum_steps")
# Every part of `paratune estimate`'s total, so a bar is as tall as the total it prints.
MEMORY_PARTS = ("params_gb", "grads_gb", "optimizer_gb", "activations_gb", "buffers_gb",
                "overhead_gb", "reserve_gb")


@dataclass
class TrialRow:
    trial_id: str
    config: dict[str, Any]
    key: str
    status: str
    phase: str  # search, screen, confirm or scaling
    value: float | None  # the objective's metric
    predicted: float | None  # the cost model's prediction of it
    gpu_hours: float
    error: str | None
    peak_memory_gb: float | None = None  # what the trial measured
    predicted_memory_gb: float | None = None  # `paratune estimate`'s total for the layout


@dataclass
class MemoryBar:
    """One top layout's predicted memory by part (GB, as `MemoryBreakdown.as_gb`) and the peak
    its trial measured."""

    key: str
    predicted: dict[str, float]
    measured_gb: float | None


@dataclass
class LayoutBreakdown:
    """One layout's predicted step time by component beside what its trial measured."""

    trial_id: str
    key: str
    value: float | None  # the objective's metric, measured
    predicted: float | None  # the objective's metric, predicted
    step_time_s: float | None  # measured
    parts: dict[str, float]  # predicted seconds by component; they sum to predicted_step_s
    predicted_step_s: float


@dataclass
class ConvergencePoint:
    """The campaign's best after one more trial ended, and what that trial cost."""

    trial_id: str
    gpu_hours: float
    best: float | None
    best_trial_id: str | None = None  # the trial that stands for the best layout then


@dataclass
class ReportData:
    campaign: str
    metric: str
    mode: str
    model: str
    cluster: str
    world_size: int
    trials: list[TrialRow]
    best: TrialRow | None
    launch_command: str
    memory_top: list[MemoryBar] = field(default_factory=list)
    scaling: list[dict[str, Any]] = field(default_factory=list)
    scaling_study: str | None = None
    calibration: dict[str, Any] | None = None
    convergence: list[ConvergencePoint] = field(default_factory=list)
    winner: LayoutBreakdown | None = None
    runner_up: LayoutBreakdown | None = None  # the second-best distinct layout
    runtime: str = ""  # the engine the cost model priced the trials as, and which key said so
    gpu_hours: float = 0.0  # what the campaign spent, as its budget counts it
    simulated: bool = False  # a rehearsal on the simulated backend: its GPU-hours are marked
    slice: dict[str, Any] | None = None  # a slice campaign's summary (record/slice_summary.py)
    slice_points: list[dict[str, Any]] = field(default_factory=list)  # report_slice.py


def _convergence(data: ReportData, go) -> Any:
    """The campaign's best so far (the rule `paratune best` uses), in the order trials
    ended, against trials run and against GPU-hours spent."""
    xs, hours, spent = [], [], 0.0
    for i, point in enumerate(data.convergence, 1):
        spent += point.gpu_hours
        xs.append(i)
        hours.append(spent)
    best_so_far = [point.best for point in data.convergence]
    best_trials = [f"best: {point.best_trial_id}" for point in data.convergence]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=best_so_far, mode="lines+markers", name="by trial", text=best_trials)
    fig.add_scatter(x=hours, y=best_so_far, mode="lines+markers", name="by GPU-hours",
                    xaxis="x2", line={"dash": "dot"}, text=best_trials)
    fig.update_layout(title="Best so far", yaxis_title=data.metric,
                      xaxis={"title": "trials run"},
                      xaxis2={"title": "GPU-hours", "overlaying": "x", "side": "top"})
    return fig


def _figures(data: ReportData) -> list[tuple[str, Any]]:
    import plotly.graph_objects as go

    figures: list[tuple[str, Any]] = []
    # At the tuned scale: a scaling study's and a slice campaign's target trials apart.
    measured = [t for t in data.trials
                if t.status == "ok" and t.value is not None and t.phase not in ("scaling", "target")]
    figures.append(("convergence", _convergence(data, go)))

    if measured:
        dims = [{"label": k, "values": [t.config.get(k) or 0 for t in measured]} for k in KNOBS]
        ac_levels = {"none": 0, "selective": 1, "full": 2}
        dims.append({"label": "recompute", "tickvals": [0, 1, 2], "ticktext": list(ac_levels),
                     "values": [ac_levels.get(t.config.get("activation_checkpointing"), 0) for t in measured]})
        dims.append({"label": data.metric, "values": [t.value for t in measured]})
        fig = go.Figure(go.Parcoords(line={"color": [t.value for t in measured],
                                           "colorscale": "Viridis", "showscale": True},
                                     dimensions=dims))
        fig.update_layout(title="Knobs against throughput")
        figures.append(("knobs", fig))

    paired = [t for t in measured if t.predicted]
    if paired:
        top = max(max(t.value for t in paired), max(t.predicted for t in paired))
        fig = go.Figure()
        fig.add_scatter(x=[t.predicted for t in paired], y=[t.value for t in paired], mode="markers",
                        text=[f"{t.trial_id} {t.key}: {100 * (t.predicted / t.value - 1):+.1f}%" for t in paired],
                        name="trials")
        fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="exact", line={"dash": "dash"})
        fig.update_layout(title="Predicted against measured", xaxis_title=f"predicted {data.metric}",
                          yaxis_title=f"measured {data.metric}")
        figures.append(("prediction", fig))

    if data.memory_top:
        figures.append(("memory", _memory(data.memory_top, go)))

    if data.scaling:
        fig = go.Figure()
        fig.add_scatter(x=[r["nodes"] for r in data.scaling], y=[100 * r["efficiency"] for r in data.scaling],
                        mode="lines+markers", name="efficiency")
        fig.update_layout(title=f"{(data.scaling_study or '').capitalize()} scaling efficiency",
                          xaxis_title="nodes", yaxis_title="% of ideal", yaxis_range=[0, 110])
        figures.append(("scaling", fig))
    if data.slice_points:
        figures.append(("slice", slice_figure(data.slice_points, data.metric, go)))
    return figures


def _memory(bars: list[MemoryBar], go) -> Any:
    """The top layouts' predicted memory, stacked to `paratune estimate`'s total, with the
    peak each trial measured beside it."""
    keys = [bar.key for bar in bars]
    fig = go.Figure()
    for part in MEMORY_PARTS:
        fig.add_bar(name=part.removesuffix("_gb"), x=keys,
                    y=[bar.predicted.get(part, 0.0) for bar in bars])
    measured = [bar.measured_gb for bar in bars]
    if any(m is not None for m in measured):
        fig.add_scatter(name="measured peak", x=keys, y=measured, mode="markers",
                        marker={"symbol": "diamond", "size": 12, "color": "black"})
    fig.update_layout(barmode="stack", yaxis_title="GB",
                      title="Memory per device, top 5: predicted total and measured peak")
    return fig


def render(data: ReportData) -> str:
    """The report page as one HTML string."""
    import plotly.io as pio

    blocks = []
    for i, (name, fig) in enumerate(_figures(data)):
        fig.update_layout(template="plotly_white", height=420, margin={"t": 60, "l": 60, "r": 30, "b": 50})
        blocks.append(f'<section id="{name}">' + pio.to_html(
            fig, full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False}) + "</section>")

    failures = Counter((t.status, (t.error or "").split(":")[0][:80]) for t in data.trials
                       if t.status not in ("ok",))
    failure_table = table(["status", "reason", "trials"],
                           [[s, r, n] for (s, r), n in failures.most_common()]) if failures else "<p>none</p>"
    scaling_table = table(["nodes", "GPUs", data.metric, "per GPU", "efficiency"],
                           [[r["nodes"], r["world_size"], f"{r['tokens_per_s']:,.0f}",
                             f"{r['tokens_per_s_per_gpu']:,.1f}", f"{100 * r['efficiency']:.1f}%"]
                            for r in data.scaling]) if data.scaling else ""
    if data.best is not None:
        best = (f"<p class='best'><b>{html.escape(data.best.key)}</b> (trial {data.best.trial_id}): "
                f"{data.metric} = {number(data.best.value)}</p>"
                "<details id='launch'><summary>Its launch script (torchrun; `paratune best "
                f"{html.escape(data.campaign)} --format ...` writes the others)</summary>"
                f"<pre>{html.escape(data.launch_command)}</pre></details>")
    else:
        best = "<p>No successful trial yet.</p>"
    calibration = calibration_section(data.calibration)
    counts = Counter(t.status for t in data.trials)
    summary = ", ".join(f"{n} {s}" for s, n in counts.most_common())
    priced = f" Priced by the cost model as {html.escape(data.runtime)}." if data.runtime else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ParaTune report: {html.escape(data.campaign)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
pre {{ background: #f5f5f5; padding: 1em; overflow-x: auto; font-size: 12px; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border: 1px solid #ccc; padding: 4px 10px; }}
section {{ margin: 2em 0; }} .best {{ font-size: 1.2em; }}
.wide {{ overflow-x: auto; }}
details summary {{ cursor: pointer; color: #3056d3; }}
#answer ul {{ font-size: 1.1em; line-height: 1.6; }}
.warning {{ background: #fff4e5; border: 2px solid #e67700; padding: 0.8em 1em; margin: 1em 0; }}
</style></head><body>
<h1>Campaign {html.escape(data.campaign)}</h1>
<p>{html.escape(data.model)} on {data.world_size} × {html.escape(data.cluster)}; objective: {data.mode}
{html.escape(data.metric)}; {len(data.trials)} trials ({html.escape(summary)}).{priced}</p>
{answer_section(data)}
<h2>Best configuration</h2>{best}{calibration}
{breakdown_section(data)}
<h2>Trials</h2>{trial_table(data)}
{''.join(blocks)}
<h2>Failures by reason</h2>{failure_table}
{'<h2>Scaling study</h2>' + scaling_table if scaling_table else ''}
{slice_section(data.slice)}
</body></html>
"""
