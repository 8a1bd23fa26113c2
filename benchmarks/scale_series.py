"""Tune small, predict large, on the published scale series: for each series of the corpus (one
model, cluster, precision and framework at several GPU counts; benchmarks/measured/), calibrate
the cost model on the rows measured at no more than 1/8 of the series' largest GPU count and
predict the step time of every larger row. What a campaign that runs its trials on a slice of
the target cluster is worth rests on this figure.

The rule was fixed before any figure was computed, and is the same for every series:
- a series qualifies when its largest GPU count is at least 8 times its smallest;
- the slice rows are those at a GPU count of at most largest/8; every other row is predicted;
- the slice rows calibrate the stock model as a slice campaign does
  (orchestrator/costmodel/calibration.py `calibrate_from_slice`: one factor on the terms that
  are the same work at any data-parallel width, the data-parallel collectives left to the
  model's collective model);
- the error of a predicted row is |predicted / measured step time - 1|; a series' figure is the
  median over its predicted rows, and each GPU count's the median over its rows.
Rows are the validation report's (validate_costmodel.py): the fit/check split is
measured_corpus's, and the fit source (Megatron-LM's README tables) is reported apart.

Run: .venv/bin/python benchmarks/scale_series.py          (writes docs/scale_series.json and
     the table in docs/scale_series.md)
     .venv/bin/python benchmarks/scale_series.py --check  (exit 1 if they are stale)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measured_corpus  # noqa: E402
from marked_block import with_marked_block  # noqa: E402
from measured_corpus import CHECK, SUPERSEDED  # noqa: E402
from validate_costmodel import DIGITS, Scored, _trial  # noqa: E402

from orchestrator.costmodel.calibration import calibrate_from_slice  # noqa: E402
from orchestrator.costmodel.published_rows import PricedRow, price_row  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JSON_PATH, MD_PATH = ROOT / "docs" / "scale_series.json", ROOT / "docs" / "scale_series.md"
SLICE_FRACTION = 8  # slice rows: at most 1/8 of the series' largest GPU count
TARGET = 0.05  # the median absolute error each series should reach


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


def _median_abs(errors: list[float]) -> float | None:
    return _round(statistics.median(abs(e) for e in errors)) if errors else None


def _series(name: str, scored: list[Scored]) -> dict | None:
    counts = sorted({s.priced.config.world_size for s in scored})
    if counts[-1] < SLICE_FRACTION * counts[0]:
        return None
    limit = counts[-1] / SLICE_FRACTION
    fitted = [s for s in scored if s.priced.config.world_size <= limit]
    predicted = [s for s in scored if s.priced.config.world_size > limit]
    fit = calibrate_from_slice(fitted[0].priced.cost, [_trial(s) for s in fitted])
    again = [Scored(s.row, s.priced, replace(s.priced.cost, coefficients=fit.model.coefficients))
             for s in predicted]
    by_count: dict[int, list[float]] = defaultdict(list)
    for s in again:
        by_count[s.priced.config.world_size].append(s.error)
    return {"source": scored[0].row.file, "series": name,
            "role": measured_corpus.ROLE_OF_SOURCE[scored[0].row.file],
            "slice_gpus": sorted({s.priced.config.world_size for s in fitted}),
            "slice_rows": len(fitted), "largest_gpus": counts[-1],
            "slice_factor": _round(fit.global_scale),
            "predicted_rows": len(again),
            "median_abs_error": _median_abs([s.error for s in again]),
            "stock_median_abs_error": _median_abs([s.error for s in predicted]),
            "by_gpus": {str(n): _median_abs(e) for n, e in sorted(by_count.items())}}


def compute() -> dict:
    """Every series' figures, from the corpus and the cost model as they are."""
    by_series: dict[str, list[Scored]] = defaultdict(list)
    for row in measured_corpus.rows():
        if row.role == SUPERSEDED:
            continue
        priced = price_row(row.values)
        if isinstance(priced, PricedRow):
            by_series[f"{row.file} · {priced.series}"].append(Scored(row, priced))
    series = [entry for name, group in sorted(by_series.items())
              if (entry := _series(name.partition(" · ")[2], group)) is not None]
    checks = [s for s in series if s["role"] == CHECK]
    return {"slice_fraction": SLICE_FRACTION, "target": TARGET, "series": series,
            "check_series": len(checks),
            "check_series_within_target": sum(s["median_abs_error"] <= TARGET for s in checks)}


def markdown(report: dict) -> str:
    lines = ["| source | series | slice GPUs | largest | slice factor | predicted rows | "
             "median abs error | stock, same rows | by GPU count |", "|---" * 9 + "|"]
    for s in report["series"]:
        by = ", ".join(f"{n}: {100 * e:.1f}%" for n, e in s["by_gpus"].items())
        lines.append(f"| {s['source'].removesuffix('.csv')}{' (fit)' if s['role'] != CHECK else ''}"
                     f" | {s['series'].replace('|', '·')} | {', '.join(map(str, s['slice_gpus']))}"
                     f" | {s['largest_gpus']:,} | {s['slice_factor']:.2f} | {s['predicted_rows']} | "
                     f"{100 * s['median_abs_error']:.1f}% | {100 * s['stock_median_abs_error']:.1f}%"
                     f" | {by} |")
    lines.append("")
    lines.append(f"Check series within {100 * report['target']:.0f}%: "
                 f"{report['check_series_within_target']} of {report['check_series']}.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    report = compute()
    text = json.dumps(report, indent=1) + "\n"
    doc = with_marked_block(MD_PATH.read_text(), "scale-series", markdown(report))
    if args.check:
        stale = JSON_PATH.read_text() != text or MD_PATH.read_text() != doc
        print("stale" if stale else "up to date")
        return int(stale)
    JSON_PATH.write_text(text)
    MD_PATH.write_text(doc)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
