"""The cost model judged on the published measurements (benchmarks/measured/): for each source,
landscape (one model on one cluster at one GPU count, sequence and precision, under several
layouts) and scale series, how far its step times are from the measured ones, how well it
ranks the layouts, what its pick costs, and which layouts that ran it calls "does not fit";
for the stock model, then after calibrating on the first 3 and the first 5 rows of each
landscape (measured_corpus.calibration_rows), scored on the rows left out.

The fit/check split is measured_corpus's: fit sources are reported apart, superseded rows not
at all. The figures are defined once, in orchestrator/costmodel/fit_figures.py (also what
`paratune calibrate --from` prints). Nothing here changes a constant; the figures are what the
model gives.

Run: .venv/bin/python benchmarks/validate_costmodel.py          (writes docs/validation.json
     and docs/validation.md)
     .venv/bin/python benchmarks/validate_costmodel.py --check  (exit 1 if they are stale)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measured_corpus  # noqa: E402
from measured_corpus import CHECK, FIT, SUPERSEDED, MeasuredRow, calibration_rows  # noqa: E402

from orchestrator.costmodel.calibration import calibrate  # noqa: E402
from orchestrator.costmodel.cluster_fit import Measurement  # noqa: E402
from orchestrator.costmodel.fit_figures import (  # noqa: E402
    abs_error_figures,
    pruned,
    ranking,
    step_error,
)
from orchestrator.costmodel.published_rows import PricedRow, price_row  # noqa: E402
from orchestrator.presets import PEAK_RANGE_OTHER_END  # noqa: E402
from orchestrator.result import TrialResult  # noqa: E402
from orchestrator.scheduling.live_cost_model import LiveCostModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JSON_PATH, MD_PATH = ROOT / "docs" / "validation.json", ROOT / "docs" / "validation.md"
CALIBRATION_SIZES = (3, 5)
DIGITS = 4


def _round(value: float | None) -> float | None:
    return None if value is None or value != value else round(value, DIGITS)


def _errors(errors: list[float]) -> dict:
    """Median and 90th percentile of |predicted/measured - 1| of step times (fit_figures), and
    the median signed error (above 0: the model predicts slower steps than were measured)."""
    return {"rows": len(errors),
            **{k: _round(v) for k, v in abs_error_figures(errors).items()},
            "median_error": _round(statistics.median(errors)) if errors else None}


class Scored:
    """One priced row under one cost model: the measurement and its estimate."""

    def __init__(self, row: MeasuredRow, priced: PricedRow, cost=None) -> None:
        self.row, self.priced = row, priced
        self.measurement = Measurement(f"{row.file} row {row.number}", priced.landscape,
                                       cost or priced.cost, priced.config,
                                       priced.measured_step_s)
        self.estimate = self.measurement.cost.estimate(priced.config)
        self.fits = self.estimate.fits
        self.pruned = pruned(self.estimate)

    @property
    def error(self) -> float:
        return step_error(self.measurement, self.estimate)

    @property
    def key(self) -> str:
        return self.priced.config.key()

    @property
    def prune_reason(self) -> str:
        """Why a campaign would skip the layout: the reason its trial would record."""
        return LiveCostModel(self.measurement.cost, []).infeasible(self.priced.config).error


def _ranking(scored: list[Scored]) -> dict:
    """fit_figures' ranking of the distinct layouts: Spearman, the pairs ordered as measured,
    the measured regret of the model's pick, and whether a pruned layout beat it."""
    found = ranking([s.measurement for s in scored], [s.estimate for s in scored])
    result: dict = {"layouts": found.layouts, "spearman": _round(found.spearman),
                    "regret": _round(found.regret), "pairs": found.pairs,
                    "pairs_right": found.pairs_right}
    if found.pick_pruned_best is not None:
        result["pick_pruned_best"] = found.pick_pruned_best
    return result


def _trial(scored: Scored) -> tuple[str, object, TrialResult]:
    priced = scored.priced
    step = priced.measured_step_s
    tokens = priced.config.global_batch_size() * priced.cost.model.seq_len
    return (f"{scored.row.file}:{scored.row.number}", priced.config,
            TrialResult(status="ok", step_time_s=step, tokens_per_s=tokens / step,
                        tokens_per_s_per_gpu=tokens / step / priced.config.world_size,
                        peak_memory_gb=priced.measured_memory_gb))


def _calibrated(stock: list[Scored], k: int, raw: dict[str, list[float]]) -> dict | None:
    """Fit on the landscape's first k rows, score the rest whose layout none of them has (a
    repeated run of a fitted layout predicts nothing), and the stock model on the same rows,
    for comparison; None without such a row. The rows' errors go to `raw`."""
    fitted, rest = calibration_rows([s.row for s in stock], k)
    by_row = {(s.row.file, s.row.number): s for s in stock}
    seen = {by_row[(r.file, r.number)].key for r in fitted}
    left_out = [by_row[(r.file, r.number)] for r in rest]
    left_out = [s for s in left_out if s.key not in seen]
    if len(fitted) < k or not left_out:
        return None
    fit = calibrate(stock[0].priced.cost, [_trial(by_row[(r.file, r.number)]) for r in fitted])
    if fit is None:
        return None
    again = [Scored(s.row, s.priced, replace(s.priced.cost,
                                             coefficients=fit.model.coefficients))
             for s in left_out]
    raw[f"calibrated_{k}"] += [s.error for s in again]
    raw[f"calibrated_{k}_stock"] += [s.error for s in left_out]
    return {**_errors([s.error for s in again]), **_ranking(again),
            "stock_on_the_same_rows": {**_errors([s.error for s in left_out]),
                                       **_ranking(left_out)},
            "one_scale_factor": fit.global_scale is not None}


def _layout_log_errors(scored: list[Scored]) -> list[float]:
    """log(predicted / measured) of each distinct layout (its rows' median), less their mean:
    how far the model is wrong about one layout against the others of its landscape, what a
    search that calibrates the whole on its own trials is left with."""
    by_layout: dict[str, list[float]] = defaultdict(list)
    for s in scored:
        by_layout[s.key].append(math.log(1 + s.error))
    logs = [statistics.median(v) for v in by_layout.values()]
    mean = statistics.mean(logs)
    return [_round(x - mean) for x in logs] if len(logs) >= 2 else []


def _landscape(name: str, scored: list[Scored], raw: dict[str, list[float]]) -> dict:
    entry = {"source": scored[0].row.file, "landscape": name, "rows": len(scored),
             "does_not_fit": sum(not s.fits for s in scored),
             "pruned": sum(s.pruned for s in scored),
             "stock": {**_errors([s.error for s in scored]), **_ranking(scored)},
             "layout_log_errors": _layout_log_errors(scored)}
    for k in CALIBRATION_SIZES:
        entry[f"calibrated_{k}"] = _calibrated(scored, k, raw)
    return entry


def _pooled(entries: list[dict], key: str, errors: list[float]) -> dict:
    """A source's figures over its landscapes: errors pooled row by row, Spearman and regret
    per landscape."""
    parts = [e[key] for e in entries if e.get(key)]
    spearmans = [p["spearman"] for p in parts if p["spearman"] is not None]
    regrets = [p["regret"] for p in parts if p["regret"] is not None]
    return {**_errors(errors), "landscapes": len(parts),
            "ranked_landscapes": len(spearmans),
            "spearman_median": _round(statistics.median(spearmans)) if spearmans else None,
            "spearman_min": _round(min(spearmans)) if spearmans else None,
            "spearman_at_least_0.7": sum(s >= 0.7 for s in spearmans),
            "regret_landscapes": len(regrets),
            "regret_median": _round(statistics.median(regrets)) if regrets else None,
            "regret_max": _round(max(regrets)) if regrets else None,
            "regret_within_3pct": sum(r <= 0.03 for r in regrets),
            "pairs": sum(p["pairs"] for p in parts),
            "pairs_right": sum(p["pairs_right"] for p in parts)}


def _source(file: str, rows: list[MeasuredRow]) -> tuple[dict, list[dict], list[dict]]:
    results = [(r, price_row(r.values)) for r in rows]
    scored = [Scored(r, p) for r, p in results if isinstance(p, PricedRow)]
    unpriced = Counter(p.reason for _, p in results if not isinstance(p, PricedRow))
    assumptions = Counter(a for s in scored for a in s.priced.assumptions)
    by_landscape: dict[str, list[Scored]] = defaultdict(list)
    by_series: dict[str, list[Scored]] = defaultdict(list)
    for s in scored:
        by_landscape[s.priced.landscape].append(s)
        by_series[s.priced.series].append(s)
    raw: dict[str, list[float]] = defaultdict(list)
    landscapes = [_landscape(name, group, raw) for name, group in sorted(by_landscape.items())
                  if len(group) >= 2]
    series = [{"source": file, "series": name, "rows": len(group),
               "gpu_counts": sorted({s.priced.config.world_size for s in group}),
               "stock": _errors([s.error for s in group])}
              for name, group in sorted(by_series.items())
              if len({s.priced.config.world_size for s in group}) >= 2]
    summary = {"role": measured_corpus.ROLE_OF_SOURCE[file], "rows": len(rows),
               "priced": len(scored), "unpriced_rows": len(rows) - len(scored),
               "unpriced": dict(sorted(unpriced.items())),
               "does_not_fit": sum(not s.fits for s in scored),
               "does_not_fit_rows": [s.row.number for s in scored if not s.fits],
               "pruned": sum(s.pruned for s in scored),
               "pruned_rows": [s.row.number for s in scored if s.pruned],
               "pruned_why": {str(s.row.number): s.prune_reason for s in scored if s.pruned},
               "stock": _pooled(landscapes, "stock", [s.error for s in scored]),
               "assumptions": dict(sorted(assumptions.items()))}
    other_end = _at_other_peak_end(scored)
    if other_end:
        summary["peak_other_end"] = other_end
    for k in CALIBRATION_SIZES:
        summary[f"calibrated_{k}"] = _pooled(landscapes, f"calibrated_{k}",
                                             raw[f"calibrated_{k}"])
        summary[f"calibrated_{k}"]["stock_on_the_same_rows"] = _errors(
            raw[f"calibrated_{k}_stock"])
    return summary, landscapes, series


def _at_other_peak_end(scored: list[Scored]) -> dict | None:
    """Where a source's cluster peak is published only as a range (PEAK_RANGE_OTHER_END), the
    source's stock errors with the range's other end priced instead, so both ends are shown."""
    moved = [s for s in scored if s.priced.cost.cluster.name in PEAK_RANGE_OTHER_END]
    if not moved:
        return None
    errors = []
    for s in scored:
        cluster = s.priced.cost.cluster
        if cluster.name in PEAK_RANGE_OTHER_END:
            cost = replace(s.priced.cost, cluster=cluster.model_copy(
                update=PEAK_RANGE_OTHER_END[cluster.name]))
            s = Scored(s.row, s.priced, cost)
        errors.append(s.error)
    return {"clusters": {name: PEAK_RANGE_OTHER_END[name] for name in
                         sorted({s.priced.cost.cluster.name for s in moved})},
            "rows": len(moved), "stock": _errors(errors)}


def compute() -> dict:
    """Every figure of docs/validation.json, from the corpus and the cost model as they are."""
    by_file: dict[str, list[MeasuredRow]] = defaultdict(list)
    for row in measured_corpus.rows():
        by_file[row.file].append(row)
    report: dict = {"split": {role: sorted(f for f, r in measured_corpus.ROLE_OF_SOURCE.items()
                                           if r == role) for role in (CHECK, FIT, SUPERSEDED)},
                    "sources": {}, "landscapes": [], "series": []}
    for file, rows in sorted(by_file.items()):
        if measured_corpus.ROLE_OF_SOURCE[file] == SUPERSEDED:
            report["sources"][file] = {"role": SUPERSEDED, "rows": len(rows)}
            continue
        summary, landscapes, series = _source(file, rows)
        report["sources"][file] = summary
        report["landscapes"] += landscapes
        report["series"] += series
    report["within_landscape"] = within_landscape(report)
    report["acceptance"] = acceptance(report)
    return report


def within_landscape(report: dict) -> dict:
    """The model's error on one layout against the others of its landscape, pooled over the
    check landscapes with two or more layouts: the width a search's uncertainty about an
    untried layout must keep (orchestrator/search/families.py)."""
    checks = {f for f, s in report["sources"].items() if s.get("role") == CHECK}
    deviations = [x for e in report["landscapes"] if e["source"] in checks
                  for x in e["layout_log_errors"]]
    ordered = sorted(abs(x) for x in deviations)
    return {"layouts": len(deviations),
            "landscapes": sum(1 for e in report["landscapes"]
                              if e["source"] in checks and e["layout_log_errors"]),
            "rms": _round(math.sqrt(statistics.mean(x * x for x in deviations))),
            "p90_abs": _round(ordered[math.ceil(0.9 * len(ordered)) - 1])}


def acceptance(report: dict) -> dict:
    """The issue's targets on the check sources, each met or not."""
    checks = {f: s for f, s in report["sources"].items() if s["role"] == CHECK}
    ran = sum(s["priced"] for s in checks.values())
    pruned = sum(s["pruned"] for s in checks.values())
    ranked = [e for e in report["landscapes"] if e["source"] in checks
              and e["stock"]["spearman"] is not None]
    five = [e["calibrated_5"] for e in report["landscapes"]
            if e["source"] in checks and e["calibrated_5"]]
    return {
        "stock_median_within_15pct": {f: s["stock"]["median_abs_error"] is not None
                                      and s["stock"]["median_abs_error"] <= 0.15
                                      for f, s in checks.items() if s["priced"]},
        "ranked_landscapes": len(ranked),
        "spearman_at_least_0.7": sum(e["stock"]["spearman"] >= 0.7 for e in ranked),
        "calibrated_5_median_within_7pct": {
            f: s["calibrated_5"]["median_abs_error"] <= 0.07
            for f, s in checks.items() if s.get("calibrated_5", {}).get("median_abs_error")
            is not None},
        "calibrated_5_regret_landscapes": sum(c["regret"] is not None for c in five),
        "calibrated_5_regret_within_3pct": sum(c["regret"] is not None and c["regret"] <= 0.03
                                               for c in five),
        "rows_that_ran": ran, "pruned": pruned,
        "pruned_share": _round(pruned / ran) if ran else None,
    }


def main() -> None:
    from validation_report import render

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/validation.json or .md differ from the code's")
    args = parser.parse_args()
    report = compute()
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    markdown = render(report)
    if args.check:
        stale = [p.name for p, new in ((JSON_PATH, text), (MD_PATH, markdown))
                 if not p.exists() or p.read_text() != new]
        if stale:
            sys.exit(f"stale: {', '.join(stale)}; run {Path(__file__).name} to rewrite them")
        return
    JSON_PATH.write_text(text)
    MD_PATH.write_text(markdown)
    print(f"wrote {JSON_PATH.relative_to(ROOT)} and {MD_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
