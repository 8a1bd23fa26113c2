"""Tune small, choose for large: a campaign whose search trials run on a slice of its target
(`scale.slice_nodes`) with the same work per GPU, whose prediction at the target comes from
the slice, and whose best is confirmed at the target within `budget.confirm_gpu_hours`."""

from __future__ import annotations

import json

import pytest
from builders import frontier_campaign, one_line_error
from conftest import EXAMPLES

from orchestrator.record.budget import gpu_hours
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import TARGET

SLICE, TARGET_NODES = 16, 128
SLICED = ("backend.noise=0.03", "backend.seed=1", "search.seed=1",
          f"scale.slice_nodes={SLICE}")


def _run(runs, *sets, resume=False):
    from orchestrator.scheduling.controller import Controller
    spec = frontier_campaign(runs, "sliced", *SLICED, *sets)
    return spec, Controller(spec).run(resume=resume)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory):
    runs = tmp_path_factory.mktemp("slice") / "runs"
    spec, summary = _run(runs, "budget.confirm_gpu_hours=700")
    return runs, spec, summary, CampaignView.open(runs, "sliced").records()


def test_search_trials_run_on_the_slice_with_each_replica_s_batch(budgeted):
    runs, spec, _, records = budgeted
    gpus = spec.gpus_per_node
    search = [r for r in records if r.phase != TARGET]
    assert search and all(r.config.world_size == SLICE * gpus for r in search)
    slices = TARGET_NODES // SLICE
    assert all(r.config.global_batch_size() * slices == spec.scale.global_batch_size
               for r in search)


def test_the_target_confirms_within_its_gpu_hours_and_names_the_best(budgeted):
    _, spec, summary, records = budgeted
    target = [r for r in records if r.phase == TARGET]
    assert target
    assert all(r.config.world_size == spec.world_size for r in target)
    assert all(r.config.global_batch_size() == spec.scale.global_batch_size for r in target)
    assert sum(gpu_hours(r) for r in target) <= 700
    assert summary.best.phase == TARGET
    measured = [r for r in target if r.result.ok]
    assert summary.best.result.tokens_per_s == max(r.result.tokens_per_s for r in measured)
    assert f"{len(target)} layout(s) measured at the target" in summary.stop_reason
    assert ("budget.confirm_gpu_hours" in summary.stop_reason
            or "no layout left could beat" in summary.stop_reason)


def test_a_confirm_budget_below_one_target_trial_confirms_none_and_says_so(tmp_path):
    runs = tmp_path / "runs"
    _, summary = _run(runs, "budget.confirm_gpu_hours=20")
    records = CampaignView.open(runs, "sliced").records()
    assert not [r for r in records if r.phase == TARGET]
    assert summary.best is not None and summary.best.phase != TARGET
    assert "no layout confirmed at the target" in summary.stop_reason
    assert "budget.confirm_gpu_hours: 0 of 20 GPU-hours" in summary.stop_reason


def test_best_exports_the_target_layout_and_an_unconfirmed_one_says_so(tmp_path, budgeted, cli):
    runs, spec, summary, _ = budgeted
    code, out, err = cli("best", "sliced", "--runs-dir", str(runs), "--format", "yaml",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["config"]["dp"] == summary.best.config.dp  # measured at the target
    assert "unconfirmed" not in err
    unconfirmed = tmp_path / "runs"
    _, lone = _run(unconfirmed, "budget.confirm_gpu_hours=20")
    code, out, err = cli("best", "sliced", "--runs-dir", str(unconfirmed), "--format", "yaml",
                         "--json")
    assert code == 0, err
    slices = TARGET_NODES // SLICE
    assert json.loads(out)["config"]["dp"] == lone.best.config.dp * slices
    assert f"measured {lone.best.trial_id} on a slice of {SLICE} nodes only" in err
    assert "unconfirmed there" in err


def test_without_a_confirm_budget_the_first_ranked_is_confirmed_and_resume_adds_none(tmp_path):
    runs = tmp_path / "runs"
    _, summary = _run(runs)
    target = [r for r in CampaignView.open(runs, "sliced").records() if r.phase == TARGET]
    assert len(target) == 1 and summary.best.trial_id == target[0].trial_id
    _run(runs, resume=True)
    again = [r for r in CampaignView.open(runs, "sliced").records() if r.phase == TARGET]
    assert [r.trial_id for r in again] == [target[0].trial_id]


@pytest.mark.parametrize("sets,words", [
    (("scale.slice_nodes=128",), ("scale.slice_nodes", "fewer than scale.nodes")),
    (("scale.slice_nodes=48",), ("scale.slice_nodes", "does not divide")),
    (("scale.slice_nodes=64", "scale.global_batch_size=1"), ("scale.slice_nodes", "global batch")),
    (("scale.study=weak", "scale.study_nodes=[16]"), ("scale.slice_nodes", "scale.study")),
])
def test_a_slice_that_is_not_part_of_the_target_is_one_line(cli, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    result = cli("plan", str(EXAMPLES / "frontier-175b.yaml"), "--set",
                 f"scale.slice_nodes={SLICE}", *args)
    one_line_error(result, *words)


def test_status_shows_the_layout_on_the_slice_predicted_and_measured_at_the_target(budgeted, cli):
    runs, _, summary, records = budgeted
    code, out, _ = cli("status", "sliced", "--runs-dir", str(runs), "--json")
    assert code == 0
    s = json.loads(out)["slice"]
    assert (s["slice_nodes"], s["target_nodes"]) == (SLICE, TARGET_NODES)
    assert s["layout"] == summary.best.config.key() and s["trial_id"] == summary.best.trial_id
    assert s["measured_at_target"] == summary.best.result.tokens_per_s
    assert s["predicted_at_target"] > 0
    on_slice = sum(gpu_hours(r) for r in records if r.phase != TARGET)
    assert s["gpu_hours_on_slice"] == pytest.approx(on_slice)
    assert s["gpu_hours_same_trials_at_full_scale"] == pytest.approx(
        on_slice * (TARGET_NODES // SLICE))
    code, out, _ = cli("status", "sliced", "--runs-dir", str(runs))
    assert f"slice of {SLICE} of {TARGET_NODES} nodes; {summary.best.config.key()}" in out


def test_the_report_shows_the_slice_against_the_target(budgeted, cli, tmp_path):
    from dashboards.report_data import report_data
    from dashboards.report_slice import slice_points
    from orchestrator.common.objective import Objective

    runs, spec, summary, records = budgeted
    code, _, err = cli("report", "sliced", "--runs-dir", str(runs), "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Slice and target</h2>" in page and 'id="slice"' in page
    points = slice_points(spec, records, Objective())
    target = [r for r in records if r.phase == TARGET]
    assert [p["trial_id"] for p in points] == [r.trial_id for r in target]
    assert all(p["measured"] == r.result.tokens_per_s for p, r in zip(points, target))
    data = report_data(CampaignView.open(runs, "sliced"))
    assert data.best.trial_id == summary.best.trial_id
    # The answer compares the target's winner with the target's trials, not the slice's.
    from dashboards.report_answer import layout_means
    assert set(layout_means(data)) == {r.config.key() for r in target if r.result.ok}


def test_slice_trials_run_side_by_side_no_more_than_the_target_holds(tmp_path):
    """128 nodes hold two 64-node slices: two trials at once, though eight are allowed."""
    from test_service import max_overlap

    runs = tmp_path / "runs"
    _run(runs, "scale.slice_nodes=64", "budget.max_concurrent=8", "budget.max_trials=6",
         "backend.latency_s=0.3")
    records = CampaignView.open(runs, "sliced").records()
    on_slice = [r for r in records if r.phase != TARGET and r.submitted_at and r.finished_at]
    assert len(on_slice) >= 4
    assert max_overlap([(r.submitted_at, r.finished_at) for r in on_slice]) == 2


def test_a_slice_trial_s_program_is_told_the_slice_s_nodes():
    from orchestrator.space.rescaled import scaled_config
    from orchestrator.campaign_spec import load_spec
    from orchestrator.trainers.arguments import placeholder_values
    from orchestrator.trial.folder import TrialFolder

    spec = load_spec(EXAMPLES / "frontier-175b.yaml", [f"scale.slice_nodes={SLICE}"])
    target = next(c for c in spec.candidates() if scaled_config(c, TARGET_NODES, SLICE, "weak"))
    on_slice = scaled_config(target, TARGET_NODES, SLICE, "weak")
    folder = TrialFolder(EXAMPLES / "t0001")
    assert placeholder_values(spec, on_slice, "t0001", folder, 3)["nodes"] == SLICE
    assert placeholder_values(spec, target, "t0002", folder, 3)["nodes"] == TARGET_NODES
