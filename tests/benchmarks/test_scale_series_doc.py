"""docs/scale_series.json and its table in docs/scale_series.md are what
benchmarks/scale_series.py computes from the corpus and the cost model now."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import scale_series  # noqa: E402


def test_the_scale_series_figures_are_current():
    report = scale_series.compute()
    assert report["series"], "no scale series qualified"
    import json
    assert json.loads(scale_series.JSON_PATH.read_text()) == json.loads(json.dumps(report)), (
        "docs/scale_series.* are stale: run .venv/bin/python benchmarks/scale_series.py")
    page = scale_series.MD_PATH.read_text()
    assert scale_series.markdown(report) in page


def test_a_slice_is_at_most_an_eighth_of_the_largest_scale():
    for s in scale_series.compute()["series"]:
        assert max(s["slice_gpus"]) * scale_series.SLICE_FRACTION <= s["largest_gpus"], s["series"]
        assert all(int(n) * scale_series.SLICE_FRACTION > s["largest_gpus"] for n in s["by_gpus"])
