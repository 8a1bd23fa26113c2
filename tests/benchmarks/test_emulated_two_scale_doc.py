"""docs/emulated_two_scale.md shows what benchmarks/emulated_two_scale.py wrote to
docs/emulated_two_scale.json, and that JSON is what the two measured tables give: the grid's
means and spreads, the 2-node best, the shaping, and (replayed again here for two seeds) the
campaigns."""

from __future__ import annotations

import json
import statistics
import sys

import pytest
from conftest import ROOT

from orchestrator.space import ParallelConfig

sys.path.insert(0, str(ROOT / "benchmarks"))

import emulated_two_scale as two_scale  # noqa: E402

REPORT = json.loads(two_scale.JSON_PATH.read_text())
PAGE = two_scale.MD_PATH.read_text()
TABLES = {nodes: json.loads(path.read_text()) for nodes, path in two_scale.TABLES.items()}


def ok_values(row: dict) -> list[float]:
    return [v for v, s in zip(row["tokens_per_s"], row["status"]) if s == "ok" and v]


def test_writing_the_json_into_a_copy_of_the_page_gives_the_page_back(tmp_path, monkeypatch):
    """The script rewrites only its marked block: the page's prose and bytes stay as they are."""
    copy = tmp_path / "emulated_two_scale.md"
    copy.write_text(PAGE)
    monkeypatch.setattr(two_scale, "MD_PATH", copy)
    two_scale.write_doc(REPORT)
    assert copy.read_text() == PAGE


def test_the_page_shows_the_json_and_its_summary_is_its_rows():
    assert two_scale.markdown(REPORT) in PAGE
    assert two_scale.summarise(REPORT["seeds"]) == REPORT["summary"]
    assert REPORT["summary"]["seeds"] == len(REPORT["seeds"]) >= 10


def test_the_grid_and_the_best_are_the_tables_means():
    expected = []
    for nodes, data in TABLES.items():
        assert data["repeats"] >= 2
        for row in data["layouts"]:
            values = ok_values(row)
            expected.append((nodes, ParallelConfig.from_dict(row["config"]).key(), len(values),
                             round(statistics.mean(values)) if values else None))
    shown = [(g["nodes"], g["layout"], g["runs"], g["tokens_per_s"]) for g in REPORT["grid"]]
    assert sorted(shown, key=str) == sorted(expected, key=str)
    best = max(e[3] for e in expected if e[0] == 2 and e[3] is not None)
    assert REPORT["best_2node"]["tokens_per_s"] == best


def test_the_link_was_shaped_to_a_tenth_of_the_in_node_collective():
    """The tc lines recorded name a rate a tenth of the median in-node probe, on both nodes,
    and the probe across the shaped link measured about that rate (within a factor of 2: the
    machine is shared)."""
    network = TABLES[2]["network"]
    assert REPORT["network"] == network == TABLES[1]["network"]
    in_node = statistics.median(network["in_node_gbytes_per_s"])
    rates = {int(line.split(" rate ")[1].split("bit")[0]) for line in network["tc"]}
    assert len(rates) == 1 and len(network["tc"]) == 2
    assert rates.pop() / 8 / 1e9 == pytest.approx(in_node * network["inter_node_share"],
                                                  rel=1e-3)
    across = statistics.median(network["across_shaped_gbytes_per_s"])
    assert in_node * network["inter_node_share"] / 2 < across < in_node * network[
        "inter_node_share"] * 2


def test_the_campaigns_replay_to_the_json(tmp_path):
    """Seeds 0 and 1 run again (seconds) give the rows the JSON holds."""
    two = two_scale.TabulatedLandscape(two_scale.TABLES[2], 0)
    for seed in (0, 1):
        row = two_scale.one_seed(seed, two.truth, REPORT["confirm_gpu_hours"],
                                 tmp_path / f"runs{seed}")
        assert row == REPORT["seeds"][seed]
