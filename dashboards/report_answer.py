"""The report's opening: the answer a person came for, before any chart or script. The winner,
how much faster it is than the median and the worst layout measured, the GPU-hours the campaign
spent (marked `sim` for a simulated rehearsal, as `paratune ls` marks them) and how far the
cost model's predictions matched the measurements, which says how far to trust the ranking.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from dashboards.report_tables import SCALING, TARGET, calibration_problems, number

ReportData = Any  # report.py's; importing it would make the two modules import each other


@dataclass
class Gains:
    """The winner's layout against the others measured at the tuned scale, each layout at the
    mean of its measurements; `over_*` is how many times better (1.25: 25% faster)."""

    layouts: int
    winner: float
    median: float
    worst: float
    over_median: float
    over_worst: float


def layout_means(data: ReportData) -> dict[str, float]:
    """Each layout measured at the tuned scale, at the mean of its successful trials: a slice
    campaign's best measured at its target is compared with the target's trials only."""
    at_target = data.best is not None and data.best.phase == TARGET
    values: dict[str, list[float]] = defaultdict(list)
    for t in data.trials:
        if t.status == "ok" and t.value is not None and t.phase != SCALING \
                and (t.phase == TARGET) == at_target:
            values[t.key].append(t.value)
    return {key: statistics.fmean(v) for key, v in values.items()}


def gains(data: ReportData) -> Gains | None:
    """None unless the winner and at least one other layout were measured."""
    means = layout_means(data)
    if data.best is None or data.best.key not in means or len(means) < 2:
        return None
    maximise = data.mode == "max"
    winner = means[data.best.key]
    median = statistics.median(means.values())
    worst = (min if maximise else max)(means.values())

    def better(than: float) -> float:
        return winner / than if maximise else than / winner

    return Gains(len(means), winner, median, worst, better(median), better(worst))


SPEED_METRICS = ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s",
                 "step_time_p90_s")


def _percent(ratio: float) -> str:
    return f"{100 * (ratio - 1):,.1f}%"


def trust_line(calibration: dict | None) -> str:
    """How far the calibrated cost model's predictions matched the measurements."""
    problems = calibration_problems(calibration)
    if calibration:
        fit = (f"its predictions were off by a median {100 * calibration['median_abs_error']:.1f}% "
               f"over {calibration['trials']} measured trials (Spearman "
               f"{calibration['spearman']:.2f})")
    else:
        fit = "no calibration"
    if problems:
        return (f"<b>low</b>: {fit}; {'; '.join(problems)}. Rely on the measured numbers, not "
                "on the model's ranking of layouts it did not measure.")
    return (f"<b>good</b>: {fit}, and it ranked the trials as the measurements did, so its "
            "ranking of the layouts not measured is worth following.")


def answer_section(data: ReportData) -> str:
    """The answer as a short list, first on the page."""
    sim = " sim" if data.simulated else ""
    spent = (f"<li>GPU-hours spent: <b id='gpu-hours'>{number(data.gpu_hours)}{sim}</b>"
             + (" (a simulated rehearsal: no GPU ran, counted against no quota)"
                if data.simulated else "") + "</li>")
    trust = f"<li id='trust'>Trust: {trust_line(data.calibration)}</li>"
    if data.best is None:
        return (f"<section id='answer'><h2>Answer</h2><ul><li>No successful trial yet.</li>"
                f"{spent}{trust}</ul></section>")
    best = data.best
    winner = (f"<li>Winner: <b>{html.escape(best.key)}</b> (trial {best.trial_id}), "
              f"{html.escape(data.metric)} <b>{number(best.value)}</b></li>")
    found, faster = gains(data), "faster" if data.metric in SPEED_METRICS else "better"
    if found is None:
        compared = "<li>Only one layout was measured: nothing to compare it with.</li>"
    else:
        compared = (f"<li id='gains'>Against the {found.layouts} layouts measured: "
                    f"<b>{_percent(found.over_median)}</b> {faster} than the median "
                    f"({number(found.median)}), <b>{_percent(found.over_worst)}</b> {faster} "
                    f"than the worst ({number(found.worst)}); layouts at the mean of their "
                    f"measurements, the winner's {number(found.winner)}</li>")
    return f"<section id='answer'><h2>Answer</h2><ul>{winner}{compared}{spent}{trust}</ul></section>"
