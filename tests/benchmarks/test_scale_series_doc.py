"""docs/scale_series.json and its table in docs/scale_series.md are what
benchmarks/scale_series.py computes from the corpus and the cost model now."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import scale_series  # noqa: E402


def test_the_scale_series_figures_are_current():
    report = scale_series.compute()
    assert report["series"], "no scale series qualified"
    assert json.loads(scale_series.JSON_PATH.read_text()) == json.loads(json.dumps(report)), (
        "docs/scale_series.* are stale: run .venv/bin/python benchmarks/scale_series.py")
    page = scale_series.MD_PATH.read_text()
    assert scale_series.markdown(report) in page


def test_a_slice_is_at_most_an_eighth_of_the_largest_scale():
    for s in scale_series.compute()["series"]:
        assert max(s["slice_gpus"]) * scale_series.SLICE_FRACTION <= s["largest_gpus"], s["series"]
        assert all(int(n) * scale_series.SLICE_FRACTION > s["largest_gpus"] for n in s["by_gpus"])


def _series(source: str, *words: str) -> dict:
    report = json.loads(scale_series.JSON_PATH.read_text())
    [found] = [s for s in report["series"] if s["source"] == source
               and all(w in s["series"] for w in words)]
    return found


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def test_the_prose_quotes_the_series_it_names():
    page = scale_series.MD_PATH.read_text()
    nemo = _series("mlperf_training_llm.csv", "gpt-175b", "NeMo Framework Release 23.09")
    pytorch = _series("mlperf_training_llm.csv", "gpt-175b", "PyTorch NVIDIA Release 23.09")
    assert (f"misses by {_pct(nemo['median_abs_error'])} (NeMo 23.09) and "
            f"{_pct(pytorch['median_abs_error'])} (PyTorch") in page
    assert (f"({_pct(nemo['stock_median_abs_error'])} and "
            f"{_pct(pytorch['stock_median_abs_error'])})") in page
    llama = _series("mlperf_training_llm.csv", "llama-3.1-405b", "h100-80g")
    assert f"**Llama 3.1 405B on H100** ({_pct(llama['median_abs_error'])})" in page
    nemotron = [_series("nvidia_dgxc_benchmarking.csv", "nemotron-4-340b", p)["median_abs_error"]
                for p in ("bf16", "fp8")]
    low, high = (round(100 * v) for v in sorted(nemotron))
    assert f"**Nemotron-4 340B** ({low}-{high}%)" in page
