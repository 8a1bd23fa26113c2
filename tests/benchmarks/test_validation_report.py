"""docs/validation.json is what the cost model gives on the published measurements now, and
docs/validation.md shows only its figures: a change to the cost model, the pricing of rows or
the corpus fails here until `benchmarks/validate_costmodel.py` is run again."""

from __future__ import annotations

import json
import re
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_costmodel  # noqa: E402
import validation_report  # noqa: E402

RERUN = "docs/validation.* are stale: run .venv/bin/python benchmarks/validate_costmodel.py"


@pytest.fixture(scope="module")
def computed() -> dict:
    return json.loads(json.dumps(validate_costmodel.compute()))  # as the file holds it


def test_the_json_is_what_the_code_computes(computed):
    published = json.loads(validate_costmodel.JSON_PATH.read_text())
    assert published == computed, RERUN


def test_the_page_is_the_json_rendered(computed):
    assert validate_costmodel.MD_PATH.read_text() == validation_report.render(computed), RERUN


def _printable_numbers(value) -> set[str]:
    """Every number of the JSON as the page may print it."""
    if isinstance(value, dict):
        return set().union(*map(_printable_numbers, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(_printable_numbers, value)) if value else set()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return set()
    return {validation_report.pct(value), validation_report.num(value)}


def test_every_figure_in_the_pages_tables_comes_from_the_json():
    published = json.loads(validate_costmodel.JSON_PATH.read_text())
    known = _printable_numbers(published)
    page = validate_costmodel.MD_PATH.read_text()
    cells = [cell.strip() for line in page.splitlines() if line.startswith("| ")
             for cell in line.strip("|").split("|")]
    figures = [c for c in cells if re.fullmatch(r"-?\d+(\.\d+)?%?", c)]
    assert figures, "the page has no table figures"
    assert [f for f in figures if f not in known] == []


def test_every_source_of_the_corpus_is_on_the_page(computed):
    page = validate_costmodel.MD_PATH.read_text()
    assert set(computed["sources"]) == set(validate_costmodel.measured_corpus.ROLE_OF_SOURCE)
    for file in computed["sources"]:
        assert f"| {validation_report.SHORT[file]} |" in page
    assert "benchmarks/validate_costmodel.py" in page


def test_each_pruned_row_is_named_on_the_page_with_its_reason(computed):
    checks = {f: s for f, s in computed["sources"].items() if s.get("role") == "check"}
    assert all(len(s["pruned_why"]) == s["pruned"] for s in checks.values())
    report = json.loads(json.dumps(computed))
    file = "nemo_megatron_bridge_perf_summary.csv"
    why = "predicted 425.00 GB per device > 351.54 GB: 186.00 GB capacity plus the margin"
    report["sources"][file]["pruned_why"] = {"77": why}
    assert f"{validation_report.SHORT[file]} row 77: {why}" in validation_report.render(report)
    page = validation_report.render(computed)
    for f, s in checks.items():
        for number, reason in s["pruned_why"].items():
            assert f"{validation_report.SHORT[f]} row {number}: {reason}" in page


def test_a_peak_published_as_a_range_is_priced_at_its_slower_end_and_shown_at_both(computed):
    """torchtitan's H100s run at 500 W, whose peak the source puts between the H100 SXM's and
    NVL's: its rows are priced at the lower peak (each row says so), and the page gives the
    source's error at the other end too, where every step predicted is faster."""
    from orchestrator.presets import CLUSTER_PRESETS, PEAK_RANGE_OTHER_END

    for name, other in PEAK_RANGE_OTHER_END.items():
        preset = CLUSTER_PRESETS[name]
        assert preset.peak_tflops < other["peak_tflops"]
        assert preset.fp8_peak_tflops < other["fp8_peak_tflops"]
    torchtitan = computed["sources"]["torchtitan_benchmarks.csv"]
    other_end = torchtitan["peak_other_end"]
    assert set(other_end["clusters"]) == {"h100-96g"}
    assert other_end["rows"] == sum(n for a, n in torchtitan["assumptions"].items()
                                    if a.startswith("peak not published, a range: h100-96g"))
    assert other_end["stock"]["median_error"] < torchtitan["stock"]["median_error"]
    page = validate_costmodel.MD_PATH.read_text()
    line = next(x for x in page.splitlines() if "torchtitan, peak published as a range" in x)
    assert validation_report.pct(other_end["stock"]["median_abs_error"]) in line
    assert validation_report.pct(torchtitan["stock"]["median_abs_error"]) in line
