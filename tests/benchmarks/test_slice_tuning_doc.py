"""docs/slice_tuning.md shows what benchmarks/slice_tuning.py wrote to docs/slice_tuning.json,
the JSON's summary is its rows' summary, and the page's other figures are what the commands
that give them print (the scale series' JSON, `plan --nodes` on the Frontier specs)."""

from __future__ import annotations

import json
import re
import sys

import pytest
from builders import cli_json
from conftest import EXAMPLES, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import slice_tuning  # noqa: E402

REPORT = json.loads(slice_tuning.JSON_PATH.read_text())
PAGE = slice_tuning.MD_PATH.read_text()


def test_the_page_shows_the_json_and_its_summary_is_its_rows():
    assert slice_tuning.markdown(REPORT) in PAGE
    assert slice_tuning.summarise(REPORT["seeds"]) == REPORT["summary"]
    assert REPORT["landscape"] == "generated" and len(REPORT["seeds"]) == 20


def test_the_scale_series_figure_is_the_scale_series_json():
    series = json.loads((ROOT / "docs" / "scale_series.json").read_text())
    said = f"{series['check_series_within_target']} of the {series['check_series']} check series"
    assert said in PAGE


@pytest.mark.parametrize("name,nodes", [("frontier-175b.yaml", "64,128"),
                                        ("frontier-1t.yaml", "192,384")])
def test_the_frontier_efficiencies_are_what_plan_prints(cli, name, nodes):
    small, large = cli_json(cli, "plan", str(EXAMPLES / name), "--nodes", nodes)["rows"]
    efficiency = 100 * large["tokens_per_s"] / small["tokens_per_s"] / 2
    stated = re.search(r"are (\d+\.\d)% and (\d+\.\d)%", PAGE).groups()
    assert f"{efficiency:.1f}" in stated


def test_the_prose_figures_are_the_jsons():
    """What the page says below the table: the slice campaign's share of the full-scale
    GPU-hours, and on how many seeds the full-scale campaign reached 3% for under 10."""
    share = REPORT["summary"]["median_share_of_full_total"]
    said = re.search(r"The slice campaign costs (under a quarter|about a fifth|under a third) "
                     r"of the full-scale one", PAGE)
    assert said, "the page no longer states the share"
    bound = {"about a fifth": (0.15, 0.225), "under a quarter": (0.2, 0.25),
             "under a third": (0.25, 1 / 3)}[said[1]]
    assert bound[0] <= share < bound[1], share
    cheap = sum(1 for s in REPORT["seeds"]
                if s["full_gpu_hours_to_3pct"] is not None and s["full_gpu_hours_to_3pct"] < 10)
    assert f"for under 10 GPU-hours on {cheap} of the\n  20 seeds" in PAGE
