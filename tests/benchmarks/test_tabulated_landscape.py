"""A recorded sweep replays as it was measured: a trial of a layout answers with one of its
recorded measurements (the table's own noise) or their mean, the same for the same seed and
trial, a layout that failed in the sweep fails again, and the truth is the measurements' mean."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from tabulated import TabulatedLandscape  # noqa: E402

from orchestrator.campaign_spec import load_spec  # noqa: E402

OVERRIDES = ["space.zero_stage=[0, 1]", "space.micro_batch_size=[1, 4]",
             "space.activation_checkpointing=[none]"]


def recorded(tmp_path: Path) -> Path:
    configs = load_spec(ROOT / "examples/quickstart.yaml", OVERRIDES).candidates()
    layouts = [{"config": c.to_dict(), "tokens_per_s": [1000.0 * (i + 1), 1100.0 * (i + 1),
                                                         900.0 * (i + 1)],
                "status": ["ok"] * 3} for i, c in enumerate(configs)]
    layouts[-1] = {**layouts[-1], "tokens_per_s": [None] * 3, "status": ["oom"] * 3}
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"name": "t", "spec": "examples/quickstart.yaml",
                                "overrides": OVERRIDES, "layouts": layouts}))
    return path


def test_a_recorded_sweep_replays_its_own_measurements(tmp_path):
    path = recorded(tmp_path)
    table = TabulatedLandscape(path, seed=3)
    first, *_, failing = table.candidates
    assert table.truth[first] == statistics.mean([1000.0, 1100.0, 900.0])
    draws = {table.run(first, f"t{i}").tokens_per_s for i in range(40)}
    assert draws == {1000.0, 1100.0, 900.0}  # the table's own spread, nothing else
    assert table.run(first, "t7").tokens_per_s == TabulatedLandscape(path, 3).run(
        first, "t7").tokens_per_s
    assert TabulatedLandscape(path, 3, noisy=False).run(first, "t1").tokens_per_s == 1000.0
    assert table.run(failing, "t1").status == "oom" and failing not in table.truth
    assert round(table.noise(), 3) == 0.1


def test_a_layout_measured_again_returns_recordings_it_has_not_returned_yet(tmp_path):
    """Three trials of one layout in one run give its three recordings, each once (a re-run
    never reproduces an earlier figure to the digit); a fourth draws among all of them."""
    path = recorded(tmp_path)
    for seed in range(10):
        table = TabulatedLandscape(path, seed=seed)
        first = table.candidates[0]
        draws = [table.run(first, f"t{i}").tokens_per_s for i in range(4)]
        assert sorted(draws[:3]) == [900.0, 1000.0, 1100.0]
        assert draws[3] in draws[:3]


def test_every_recorded_table_covers_its_own_specs_space():
    """Each table in benchmarks/landscapes/ replays exactly the layouts its spec and overrides
    make today, every one measured at least once, so a change to the space or the layout rules
    that leaves a table behind fails here rather than in a benchmark run."""
    tables = sorted((ROOT / "benchmarks/landscapes").glob("*.json"))
    assert any(t.name == "cpu-cp-grid.json" for t in tables)
    for table in tables:
        landscape = TabulatedLandscape(table, seed=0)
        space = set(landscape.spec.candidates())
        assert set(landscape.candidates) == space, table.name
        assert all(landscape.measured(c) for c in landscape.candidates), table.name
