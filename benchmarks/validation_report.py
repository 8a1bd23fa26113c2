"""docs/validation.md from docs/validation.json (benchmarks/validate_costmodel.py): every figure
in it is the JSON's, formatted by `pct` or printed as a count, so the page cannot drift from the
figures the tests check."""

from __future__ import annotations

SHORT = {
    "calculon_validation_megatron_seqsel.csv": "calculon (Korthikanti 2022)",
    "dlperf_gpt_v100.csv": "DLPerf V100",
    "llmfoundry_mpt.csv": "llm-foundry",
    "megatron_lm_readme.csv": "Megatron-LM README",
    "mlperf_training_llm.csv": "MLPerf Training",
    "nemo_24.07_perf_summary.csv": "NeMo 24.07",
    "nemo_long_sequence_cp.csv": "NeMo long sequence",
    "nemo_megatron_bridge_perf_summary.csv": "Megatron-Bridge",
    "nvidia_dgxc_benchmarking.csv": "dgxc-benchmarking",
    "torchtitan_benchmarks.csv": "torchtitan",
    "llmfoundry_mpt_2023-07_superseded.csv": "llm-foundry 2023-07",
}
COMMANDS = """```bash
.venv/bin/python benchmarks/validate_costmodel.py          # rewrites docs/validation.json and .md
.venv/bin/python benchmarks/validate_costmodel.py --check  # exit 1 if either is stale
.venv/bin/python -m pytest -q tests/benchmarks/test_validation_report.py tests/costmodel/test_published_rows.py
```"""


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def num(value) -> str:
    return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _scored(report: dict) -> list[tuple[str, dict]]:
    return [(f, s) for f, s in report["sources"].items() if "priced" in s]


def rows_table(report: dict) -> list[str]:
    rows = [[SHORT[f], s["role"], num(s["rows"]), num(s.get("priced")),
             num(s.get("unpriced_rows")),
             num(s.get("does_not_fit")), num(s.get("pruned"))]
            for f, s in report["sources"].items()]
    return _table(["source", "role", "rows", "priced", "unpriced", "does not fit, though it ran",
                   "pruned (beyond the margin)"], rows)


def stock_table(report: dict) -> list[str]:
    rows = []
    for f, s in _scored(report):
        t = s["stock"]
        rows.append([SHORT[f], s["role"], num(t["rows"]), pct(t["median_abs_error"]),
                     pct(t["p90_abs_error"]), pct(t["median_error"]), num(t["landscapes"]),
                     num(t["ranked_landscapes"]), f"{t['pairs_right']} of {t['pairs']}",
                     num(t["regret_landscapes"]), pct(t["regret_median"]),
                     pct(t["regret_max"])])
    return _table(["source", "role", "rows", "median abs error", "p90 abs error",
                   "median error (+: predicted slower)", "landscapes (≥ 2 rows)",
                   "landscapes with ≥ 5 layouts", "layout pairs ordered right",
                   "landscapes with a pick", "regret, median", "regret, max"], rows)


def calibrated_table(report: dict) -> list[str]:
    rows = []
    for f, s in _scored(report):
        for k in (3, 5):
            c = s[f"calibrated_{k}"]
            if not c["landscapes"]:
                continue
            rows.append([SHORT[f], str(k), num(c["landscapes"]), num(c["rows"]),
                         pct(c["median_abs_error"]), pct(c["p90_abs_error"]),
                         pct(c["stock_on_the_same_rows"]["median_abs_error"]),
                         f"{c['pairs_right']} of {c['pairs']}", num(c["regret_landscapes"]),
                         pct(c["regret_max"])])
    return _table(["source", "rows fitted", "landscapes", "rows scored", "median abs error",
                   "p90 abs error", "stock, same rows", "layout pairs ordered right",
                   "landscapes with a pick", "regret, max"], rows)


def landscape_table(report: dict) -> list[str]:
    rows = []
    for e in report["landscapes"]:
        t = e["stock"]
        cal = [pct(e[k]["median_abs_error"]) if e[k] else "–"
               for k in ("calibrated_3", "calibrated_5")]
        rows.append([SHORT[e["source"]], e["landscape"].replace("|", "·"), num(e["rows"]),
                     num(t["layouts"]), pct(t["median_abs_error"]), pct(t["p90_abs_error"]),
                     num(t["spearman"]), pct(t["regret"]), *cal, num(e["does_not_fit"])])
    return _table(["source", "landscape", "rows", "layouts", "median abs error", "p90",
                   "Spearman", "regret", "after 3", "after 5", "does not fit"], rows)


def series_table(report: dict) -> list[str]:
    rows = [[SHORT[e["source"]], e["series"].replace("|", "·"), num(e["rows"]),
             ", ".join(map(str, e["gpu_counts"])), pct(e["stock"]["median_abs_error"]),
             pct(e["stock"]["p90_abs_error"]), pct(e["stock"]["median_error"])]
            for e in report["series"]]
    return _table(["source", "series", "rows", "GPUs", "median abs error", "p90",
                   "median error"], rows)


def _listing(report: dict, key: str) -> list[str]:
    lines = []
    for f, s in _scored(report):
        if s[key]:
            lines += [f"- **{SHORT[f]}**: " + "; ".join(f"{text} ({n})"
                                                      for text, n in s[key].items())]
    return lines


def peak_ranges(report: dict) -> list[str]:
    """A source whose cluster's peak is published as a range: its figure at the other end."""
    lines = []
    for f, s in _scored(report):
        other = s.get("peak_other_end")
        if other:
            ends = "; ".join(f"{name} at {v['peak_tflops']:g} TFLOPS BF16 "
                             f"({v['fp8_peak_tflops']:g} FP8)"
                             for name, v in other["clusters"].items())
            lines.append(
                f"- **{SHORT[f]}, peak published as a range**: priced at its least favourable "
                f"end, median absolute error {pct(s['stock']['median_abs_error'])}; at the "
                f"other end ({ends}, {other['rows']} rows) "
                f"{pct(other['stock']['median_abs_error'])} (median error "
                f"{pct(other['stock']['median_error'])}).")
    return lines


def summary(report: dict) -> list[str]:
    a, w = report["acceptance"], report["within_landscape"]
    met = [SHORT[f] for f, ok in a["stock_median_within_15pct"].items() if ok]
    missed = [SHORT[f] for f, ok in a["stock_median_within_15pct"].items() if not ok]
    five = a["calibrated_5_median_within_7pct"]
    most = max((e["stock"]["layouts"] for e in report["landscapes"]), default=0)
    pruned_list = "; ".join(f"{SHORT[f]} row {n}: {why}" for f, s in _scored(report)
                            if s["role"] == "check" for n, why in s["pruned_why"].items())
    return [
        f"- **Stock median absolute error ≤ 15% per check source**: met by {len(met)} of "
        f"{len(met) + len(missed)} ({', '.join(met) or 'none'}); missed by "
        f"{', '.join(missed) or 'none'}.",
        f"- **Spearman ≥ 0.7 on each landscape with ≥ 5 layouts**: {a['ranked_landscapes']} "
        f"such landscapes on the check rows, {a['spearman_at_least_0.7']} at 0.7 or above. "
        f"Under the landscape definition (one model, cluster, GPU count, sequence, precision "
        f"and framework), the corpus's largest landscape holds {most} distinct layouts, so "
        "this target cannot be assessed on it; the pairwise order of the layouts it does hold "
        "is in the stock table.",
        f"- **After calibrating on 5 rows: median ≤ 7%, regret ≤ 3%**: "
        f"{sum(five.values())} of {len(five)} sources with a row left to score meet the "
        f"median ({', '.join(f'{SHORT[f]}: ' + ('met' if ok else 'missed') for f, ok in five.items()) or 'none'}); "
        f"{a['calibrated_5_regret_within_3pct']} of {a['calibrated_5_regret_landscapes']} "
        "landscapes with two or more unseen layouts are within 3% regret.",
        f"- **Memory: at most 1% of the rows that ran pruned**: {a['pruned']} of "
        f"{a['rows_that_ran']} priced check rows ({pct(a['pruned_share'])}) are pruned; "
        "every one ran. The rows are listed by number in docs/validation.json "
        "(`pruned_rows`, `does_not_fit_rows` per source); each pruned row and why: "
        + (pruned_list or "none."),
        *peak_ranges(report),
        f"- **Within a landscape** (not a target; what the cost-guided searcher's stop rule "
        f"takes as the model's error, orchestrator/search/families.py): over "
        f"{w['layouts']} layouts of {w['landscapes']} check landscapes, log(predicted / "
        f"measured) less its landscape's mean has an rms of {w['rms']:.3f} and a 90th "
        f"percentile of {w['p90_abs']:.3f} in absolute value.",
    ]


def render(report: dict) -> str:
    split = report["split"]
    lines = [
        "# The cost model against published measurements",
        "",
        "Generated by `benchmarks/validate_costmodel.py` from the 1,588 published "
        "measurements in `benchmarks/measured/` (README there); do not edit by hand. The "
        "figures are the stock model's as the code stands; no constant was fitted to a "
        "check row. Fit sources (" + ", ".join(SHORT[f] for f in split["fit"]) + ") may "
        "have fitted constants and are reported apart; superseded rows ("
        + ", ".join(SHORT[f] for f in split["superseded"]) + ") are not scored.",
        "",
        "Error is `predicted / measured - 1` of one optimizer step's time (a throughput "
        "metric converted to a step time, as each row's assumptions say). A landscape is one "
        "model on one cluster at one GPU count, sequence length, precision and framework; "
        "its layouts are ranked by tokens/s/GPU (repeated runs of one layout: their median). "
        "The regret is the measured best over the measured throughput of the layout the "
        "model predicts fastest among those it does not prune, minus 1. Calibration fits "
        "`calibrate` (orchestrator/costmodel/calibration.py) on a landscape's first 3 or 5 "
        "rows in file order and scores its other rows whose layout was not fitted.",
        "",
        "A setting a row does not publish is priced as its assumptions say. Megatron-Bridge's "
        "and NeMo 24.07's tables print no recompute; their launch code sets it, and "
        "`orchestrator/costmodel/published_recipes.py` holds what it set for each run whose "
        "release has a config of the published layout (read from the repository at that "
        "release). A run that offloads activations to the host is unpriced (the layout has "
        "no knob for it); a run with no such config gets the least recompute the model says "
        "fits, as rows of the other sources that publish none do.",
        "",
        "## Reproduce", "", COMMANDS, "",
        "## Against the targets", "", *summary(report), "",
        "## Rows", "", *rows_table(report), "",
        "## Step time and ranking, stock model", "", *stock_table(report), "",
        "## After calibrating on a landscape's first rows", "", *calibrated_table(report), "",
        "## Landscapes (2 rows or more)", "", *landscape_table(report), "",
        "## Scale series (2 GPU counts or more)", "", *series_table(report), "",
        "## Why rows are unpriced", "", *_listing(report, "unpriced"), "",
        "## Assumptions per source (rows priced with each)", "",
        *_listing(report, "assumptions"), "",
    ]
    return "\n".join(lines)
