"""The report's tables and notices as HTML: every trial, the winner against the runner-up by
time component, and the warning a weak calibration earns. A person decides whether to trust
the winner from these numbers, so they are printed in full (thousands separators, fixed
decimals, never e-notation) and the predicted ones stand beside the measured ones.
"""

from __future__ import annotations

import html
import math
from typing import Any

from orchestrator.common.errors import one_line
from orchestrator.common.objective import Objective
from orchestrator.tracking.view import varying_knobs as varying

# report.py's plain data classes, named here only in annotations: importing them would make
# the two modules import each other.
ReportData = TrialRow = LayoutBreakdown = Any

# Below this rank correlation between predicted and measured throughput, or over fewer
# trials than FEW_TRIALS, the cost model's ranking is not evidence for the winner: with 4
# trials even a perfect Spearman is reached by chance one time in 12.
WEAK_SPEARMAN = 0.5
FEW_TRIALS = 5
ERROR_CHARS = 120
SCALING = "scaling"
TARGET = "target"  # a slice campaign's trials at its full target scale


def number(value: float | None, digits: int = 3) -> str:
    """`value` to about `digits` significant digits, in fixed notation with thousands
    separators (624,746; 1.68; 0.000254); a dash for a missing value."""
    if value is None:
        return "–"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = min(12, max(0, digits - 1 - math.floor(math.log10(abs(value)))))
    return f"{value:,.{decimals}f}"


def gigabytes(value: float | None) -> str:
    """GB as `paratune estimate`'s total would read to the hundredth."""
    return "–" if value is None else f"{value:,.2f}"


def table(headers: list[str], rows: list[list[Any]], table_id: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def varying_knobs(rows: list[TrialRow]) -> list[str]:
    """The layout fields whose value differs between trials: the ones worth a column (as
    the MLflow trial view picks its knob columns)."""
    return varying([row.config for row in rows])


def table_order(rows: list[TrialRow], objective: Objective) -> list[TrialRow]:
    """Trials at the tuned scale that succeeded, best first; then the scaling study's, whose
    values are at other scales; then the rest by trial ID."""
    measured = [r for r in rows if r.status == "ok" and r.value is not None]
    tuned = objective.ranked([r for r in measured if r.phase != SCALING], lambda r: r.value)
    scaled = objective.ranked([r for r in measured if r.phase == SCALING], lambda r: r.value)
    shown = {id(r) for r in tuned + scaled}
    return tuned + scaled + [r for r in rows if id(r) not in shown]


def trial_table(data: ReportData) -> str:
    """One row per trial that ran, best first; layouts pruned as infeasible as a count."""
    ran = [t for t in data.trials if t.status != "infeasible"]
    pruned = len(data.trials) - len(ran)
    knobs = varying_knobs(ran)
    headers = ["trial", *knobs, "status", "phase", f"{data.metric} measured",
               f"{data.metric} predicted", "peak memory GB measured", "memory GB predicted",
               "GPU-hours", "error"]
    rows = [[t.trial_id, *(t.config.get(k) for k in knobs), t.status, t.phase,
             number(t.value), number(t.predicted), gigabytes(t.peak_memory_gb),
             gigabytes(t.predicted_memory_gb), number(t.gpu_hours),
             one_line(t.error, ERROR_CHARS) if t.error else ""]
            for t in table_order(ran, Objective(data.metric, data.mode))]
    note = ("<p>Predicted memory is the total `paratune estimate` prints for the layout: it "
            "includes the runtime overhead and the fragmentation reserve, which a measured "
            "peak does not see.</p>")
    folded = (f"<p>{pruned:,} more layout{'s' if pruned != 1 else ''} pruned as infeasible "
              "(predicted not to fit in memory; never run).</p>") if pruned else ""
    return f"<div class='wide'>{table(headers, rows, 'trial-table')}</div>{note}{folded}"


def calibration_problems(calibration: dict | None) -> list[str]:
    """Why the cost model's ranking is no evidence for the winner, if it is not."""
    if calibration is None:
        return ["fewer than 3 trials succeeded, too few to calibrate the cost model at all"]
    problems = []
    rho, trials = calibration["spearman"], calibration["trials"]
    if rho is None or not math.isfinite(rho):
        problems.append("its predictions do not rank the trials (Spearman undefined)")
    elif rho < WEAK_SPEARMAN:
        order = "the opposite order" if rho < 0 else "a different order"
        problems.append(f"it ranked the trials in {order} from the measurements (Spearman "
                        f"{rho:.2f}, below {WEAK_SPEARMAN})")
    if trials < FEW_TRIALS:
        problems.append(f"it was checked on {trials} trials, fewer than {FEW_TRIALS}")
    return problems


def calibration_section(calibration: dict | None) -> str:
    """The calibration's numbers, under a warning when its ranking is weak or unchecked."""
    text = ""
    if calibration:
        memory = calibration.get("memory_scale")
        memory_text = ("memory not measured" if memory is None
                       else f"memory measured/predicted {memory:.2f}")
        text = (f"<p>Calibrated cost model: median |error| "
                f"{100 * calibration['median_abs_error']:.1f}%, Spearman "
                f"{calibration['spearman']:.2f} over {calibration['trials']} trials; "
                f"{memory_text}.</p>")
    problems = calibration_problems(calibration)
    if not problems:
        return text
    warning = ("<div class='warning' id='calibration-warning'><b>Warning: the cost model's "
               "ranking did not match the measurements</b> (or could not be checked): "
               f"{html.escape('; '.join(problems))}. Trust the measured numbers in this report "
               "over the predicted ones, and run more trials (`paratune resume NAME --set "
               "budget.max_trials=N`, N above the trials run) before relying on a "
               "prediction.</div>")
    return warning + text


def _ms(seconds: float | None) -> str:
    return number(None if seconds is None else seconds * 1e3)


def breakdown_rows(metric: str, a: LayoutBreakdown, b: LayoutBreakdown) -> list[list]:
    """Measured and predicted numbers, then the predicted step by component, in ms."""
    def row(label, x, y, show=number):
        gap = None if x is None or y is None else y - x
        return [label, show(x), show(y), show(gap)]

    rows = [["layout", a.key, b.key, ""], row(f"{metric} measured", a.value, b.value),
            row(f"{metric} predicted", a.predicted, b.predicted),
            row("step time measured, ms", a.step_time_s, b.step_time_s, _ms),
            row("step time predicted, ms", a.predicted_step_s, b.predicted_step_s, _ms)]
    rows += [row(f"of which {part}, ms", a.parts[part], b.parts.get(part, 0.0), _ms)
             for part in a.parts if a.parts[part] or b.parts.get(part)]
    return rows


def why_it_wins(a: LayoutBreakdown, b: LayoutBreakdown) -> str:
    """One sentence: the components the runner-up spends more and less time on, largest
    first, ignoring gaps under 0.5% of the winner's step."""
    gap = b.predicted_step_s - a.predicted_step_s
    if gap <= 0:
        return (f"The model predicts the runner-up's step {_ms(-gap)} ms shorter: the winner "
                "wins on measurement alone, against the model's prediction.")
    gaps = {part: b.parts.get(part, 0.0) - a.parts[part] for part in a.parts}
    shown = sorted((p for p in gaps if abs(gaps[p]) >= 0.005 * a.predicted_step_s),
                   key=lambda p: -abs(gaps[p]))
    more = ", ".join(f"{p} (+{_ms(gaps[p])} ms)" for p in shown if gaps[p] > 0)
    less = ", ".join(f"{p} ({_ms(gaps[p])} ms)" for p in shown if gaps[p] < 0)
    return (f"The model predicts the runner-up's step {_ms(gap)} ms longer: it spends more on "
            f"{more or 'nothing large'}" + (f", and less on {less}" if less else "") + ".")


def breakdown_section(data: ReportData) -> str:
    """The winner beside the runner-up, so a reader sees which step-time component the win
    comes from, and whether the model or only the measurement says the winner is faster."""
    a, b = data.winner, data.runner_up
    if a is None:
        return ""
    title = "<h2>Winner against runner-up</h2>"
    if b is None:
        return title + "<p>Only one layout succeeded: no runner-up to compare.</p>"
    headers = ["", f"winner ({a.trial_id})", f"runner-up ({b.trial_id})",
               "runner-up − winner"]
    body = table(headers, breakdown_rows(data.metric, a, b), "runner-up")
    return title + body + f"<p>{html.escape(why_it_wins(a, b))}</p>"
