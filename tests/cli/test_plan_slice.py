"""`plan` of a slice campaign says what its trials run on the slice, which ranked layouts the
slice cannot hold, and what its trials cost there against the same trials at full scale."""

from __future__ import annotations

import pytest
from builders import cli_json
from conftest import EXAMPLES

from orchestrator.space.rescaled import scaled_config
from orchestrator.space import Layout


def test_the_frontier_1t_slices_cannot_hold_its_best_layouts_and_say_the_gpu_hours(cli):
    plan = cli_json(cli, "plan", str(EXAMPLES / "frontier-1t-scale-down.yaml"))
    s = plan["slice"]
    assert (s["slice_nodes"], s["target_nodes"], s["slices"]) == (48, 384, 8)
    assert s["global_batch_size_on_slice"] == 3072 // 8
    assert s["first_on_slice"] is None and s["not_on_slice"] == s["ranked"]
    assert s["tuning_gpu_hours_on_slices"] == pytest.approx(
        s["trials"] * s["trial_gpu_hours_on_slice"])
    assert s["tuning_gpu_hours_at_full_scale"] == pytest.approx(
        s["trials"] * s["trial_gpu_hours_at_target"])
    assert 6 < s["tuning_gpu_hours_at_full_scale"] / s["tuning_gpu_hours_on_slices"] < 10
    code, out, _ = cli("plan", str(EXAMPLES / "frontier-1t-scale-down.yaml"))
    assert code == 0
    assert "slice: each search trial runs on 48 of the target's 384 nodes" in out
    assert f"{s['tuning_gpu_hours_on_slices']:,.0f} GPU-hours on slices, against " \
           f"{s['tuning_gpu_hours_at_full_scale']:,.0f} at full scale" in out


def test_a_layout_the_slice_holds_is_named_as_it_runs_there(cli):
    plan = cli_json(cli, "plan", str(EXAMPLES / "frontier-175b.yaml"), "--set",
                    "scale.slice_nodes=16")
    best = Layout.from_dict(plan["best"]["config"])
    assert plan["slice"]["first_on_slice"] == scaled_config(best, 128, 16, "weak").key()


def test_a_campaign_at_its_target_has_no_slice_plan(cli):
    assert cli_json(cli, "plan", str(EXAMPLES / "frontier-175b.yaml"))["slice"] is None
