"""What the report shows so a person can trust its winner: every trial in one table, measured
memory beside the memory `paratune estimate` predicts, a warning when the calibrated cost
model's ranking is weak, and the winner against the runner-up by step-time component. Each
test runs a simulated campaign (seconds) and reads the rendered page."""

from __future__ import annotations

import dataclasses
import html
import json
import re

import pytest
import yaml

from dashboards.report import MEMORY_PARTS, render
from dashboards.report_data import report_data
from dashboards.report_tables import FEW_TRIALS, WEAK_SPEARMAN
from orchestrator.backends import SimulatedBackend
from orchestrator.costmodel import CostModel
from orchestrator.costmodel.calibration import calibrate
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.record.campaign import CampaignView
from orchestrator.result import TrialResult
from orchestrator.space import Layout

WARNING = "id='calibration-warning'><b>Warning: the cost model's ranking did not match"


def simulated_campaign(tmp_path, cli, name: str, space: dict, trials: int, **extra) -> CampaignView:
    """A finished simulated campaign of llama-7b on 64 H100s; `extra` replaces spec keys."""
    data = {"name": name, "model": "llama-7b", "cluster": "h100-80g",
            "scale": {"nodes": 8, "global_batch_size": 512}, "space": space,
            "search": {"algorithm": "grid"}, "budget": {"max_trials": trials},
            "backend": {"kind": "simulated", "seed": 5, "noise": 0.05},
            "tracking": {"enabled": False}, **extra}
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    return CampaignView.open(tmp_path / "runs", name)


# 12 layouts on a 48 GB device: 4 are pruned as infeasible (beyond the memory model's margin),
# the rest run (with a 30% crash rate; those over 48 GB run out of memory).
MIXED = {"tp": [1, 2], "zero_stage": [0, 1, 3], "micro_batch_size": [1, 8],
         "activation_checkpointing": ["none"]}
# 8 layouts that all fit: a calibration on 8 trials that ranks them right.
CLEAN = {"tp": [1, 2, 4, 8], "zero_stage": [1, 3], "micro_batch_size": [2],
         "activation_checkpointing": ["none"]}


def mixed(tmp_path, cli, objective: dict | None = None) -> CampaignView:
    failing = {"kind": "simulated", "seed": 5, "noise": 0.05, "failure_rate": 0.3}
    return simulated_campaign(tmp_path, cli, "mixed", MIXED, 12, backend=failing,
                              cluster={"preset": "h100-80g", "memory_gb": 48},
                              objective=objective or {"metric": "tokens_per_s", "mode": "max"})


def html_rows(page: str, table_id: str) -> list[list[str]]:
    """The body rows of the page's table `table_id`, as cell texts."""
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body)]


def table_headers(page: str, table_id: str) -> list[str]:
    head = re.search(rf'<table id="{table_id}"><thead>(.*?)</thead>', page, re.S).group(1)
    return [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", head)]


@pytest.mark.parametrize("objective", [{"metric": "tokens_per_s", "mode": "max"},
                                       {"metric": "step_time_s", "mode": "min"}])
def test_the_trial_table_lists_every_trial_that_ran_best_first(tmp_path, runs_dir, cli,
                                                              objective):
    view = mixed(tmp_path, cli, objective)
    records = view.records()
    results = {r.trial_id: r.result for r in records}
    ran = [r for r in records if r.result.status != "infeasible"]
    pruned = len(records) - len(ran)
    assert pruned and any(r.result.status == "failed" for r in ran)
    page = render(report_data(view))

    headers = table_headers(page, "trial-table")
    metric = objective["metric"]
    assert headers == ["trial", "tp", "dp", "zero_stage", "micro_batch_size", "grad_accum_steps",
                       "status", "phase", f"{metric} measured", f"{metric} predicted",
                       "peak memory GB measured", "memory GB predicted", "GPU-hours", "error"]
    rows = html_rows(page, "trial-table")
    assert sorted(row[0] for row in rows) == sorted(r.trial_id for r in ran)
    ok = [row[0] for row in rows if results[row[0]].status == "ok"]
    values = [results[t].metric(metric) for t in ok]
    assert values == sorted(values, reverse=objective["mode"] == "max")
    assert [row[0] for row in rows][:len(ok)] == ok  # failures after the successes
    assert f"{pruned} more layouts pruned as infeasible" in page
    status = headers.index("status")
    failed = next(row for row in rows if row[status] == "failed")
    assert failed[-1] == results[failed[0]].error and failed[headers.index("phase")] == "search"
    table = re.search(r'<table id="trial-table">.*?</table>', page, re.S).group(0)
    assert not re.search(r"\d[eE][+-]?\d", table)  # no e-notation anywhere
    if metric == "tokens_per_s":  # thousands separators on throughput
        measured = headers.index(f"{metric} measured")
        assert all(re.fullmatch(r"\d{3},\d{3}", row[measured]) for row in rows if row[0] in ok)
    assert not re.search(r"= \d\.\d+e\+", page)  # nor in the best's line


def test_a_long_error_is_cut_to_one_line_of_about_120_characters(tmp_path, runs_dir, cli,
                                                                 monkeypatch):
    long_error = "RuntimeError: NCCL error\n" + "x" * 400
    run = SimulatedBackend.run

    def crashing(self, config, trial_id, steps=None):
        result = run(self, config, trial_id, steps)
        if config.tp == 2:
            return TrialResult(status="failed", world_size=result.world_size, error=long_error)
        return result

    monkeypatch.setattr(SimulatedBackend, "run", crashing)
    view = simulated_campaign(tmp_path, cli, "crashes", CLEAN, 8)
    page = render(report_data(view))
    headers = table_headers(page, "trial-table")
    errors = [row[-1] for row in html_rows(page, "trial-table")
              if row[headers.index("status")] == "failed"]
    assert len(errors) == 2
    assert all(e.startswith("RuntimeError: NCCL error x") and len(e) <= 120 for e in errors)


def estimate_json(cli, spec_file: str, layout: Layout) -> dict:
    code, out, err = cli("estimate", spec_file, "--tp", str(layout.tp), "--pp", str(layout.pp),
                         "--zero-stage", str(layout.zero_stage), "--micro-batch-size",
                         str(layout.micro_batch_size), "--activation-checkpointing",
                         layout.activation_checkpointing, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["chosen"] == "pinned" and data["config"] == layout.to_dict()
    return data


def test_memory_shows_the_measured_peak_beside_what_paratune_estimate_predicts(
        tmp_path, runs_dir, cli):
    view = simulated_campaign(tmp_path, cli, "clean", CLEAN, 8)
    data = report_data(view)
    page = render(data)
    headers = table_headers(page, "trial-table")
    rows = {row[0]: row for row in html_rows(page, "trial-table")}
    spec_file = str(tmp_path / "clean.yaml")
    for record in view.records()[:3]:
        total = estimate_json(cli, spec_file, record.config)["memory"]["total_gb"]
        row = next(t for t in data.trials if t.trial_id == record.trial_id)
        assert row.predicted_memory_gb == pytest.approx(total, rel=1e-12)
        shown = rows[record.trial_id]
        assert shown[headers.index("memory GB predicted")] == f"{total:,.2f}"
        assert shown[headers.index("peak memory GB measured")] == \
            f"{record.result.peak_memory_gb:,.2f}"
        # overhead and reserve are in the total, so it exceeds what a measurement sees
        assert total > record.result.peak_memory_gb
    best = data.memory_top[0]
    total = estimate_json(cli, spec_file, view.best().config)["memory"]["total_gb"]
    assert sum(best.predicted[part] for part in MEMORY_PARTS) == pytest.approx(total)
    assert best.measured_gb == view.best().result.peak_memory_gb
    assert '"name":"reserve"' in page and '"name":"overhead"' in page
    assert '"name":"measured peak"' in page


def test_a_weak_calibration_is_flagged_and_a_good_one_is_not(tmp_path, runs_dir, cli):
    view = simulated_campaign(tmp_path, cli, "clean", CLEAN, 8)
    data = report_data(view)
    assert data.calibration["trials"] >= FEW_TRIALS
    assert data.calibration["spearman"] >= WEAK_SPEARMAN
    assert WARNING not in render(data)

    reversed_ranking = {**data.calibration, "spearman": -0.5}
    page = render(dataclasses.replace(data, calibration=reversed_ranking))
    warning = re.search(r"<div class='warning' id='calibration-warning'>(.*?)</div>",
                        page, re.S).group(1)
    assert "the opposite order" in warning and "Spearman -0.50, below 0.5" in warning
    assert "Trust the measured numbers" in warning and "run more trials" in warning
    weak = {**data.calibration, "spearman": 0.3}
    assert "a different order" in render(dataclasses.replace(data, calibration=weak))
    undefined = {**data.calibration, "spearman": float("nan")}
    assert "Spearman undefined" in render(dataclasses.replace(data, calibration=undefined))


def test_too_few_trials_to_trust_the_ranking_are_flagged(tmp_path, runs_dir, cli):
    four = simulated_campaign(tmp_path, cli, "four", CLEAN, 4)
    page = render(report_data(four))
    assert WARNING in page and f"checked on 4 trials, fewer than {FEW_TRIALS}" in page
    two = simulated_campaign(tmp_path, cli, "two", CLEAN, 2)
    data = report_data(two)
    assert data.calibration is None
    assert "too few to calibrate the cost model at all" in render(data)


def test_the_winner_is_set_beside_the_runner_up_by_time_component(tmp_path, runs_dir, cli):
    view = simulated_campaign(tmp_path, cli, "clean", CLEAN, 8)
    data = report_data(view)
    ranked = sorted(view.records(), key=lambda r: -r.result.tokens_per_s)
    winner, second = ranked[0], ranked[1]
    assert winner.config != second.config
    assert (data.winner.trial_id, data.runner_up.trial_id) == (winner.trial_id, second.trial_id)
    for side in (data.winner, data.runner_up):
        assert sum(side.parts.values()) == pytest.approx(side.predicted_step_s)
    page = render(data)
    assert "<h2>Winner against runner-up</h2>" in page
    headers = table_headers(page, "runner-up")
    assert headers[1:] == [f"winner ({winner.trial_id})", f"runner-up ({second.trial_id})",
                           "runner-up − winner"]
    rows = {row[0]: row[1:] for row in html_rows(page, "runner-up")}
    assert rows["layout"][:2] == [winner.config.key(), second.config.key()]
    assert rows["tokens_per_s measured"][:2] == [f"{winner.result.tokens_per_s:,.0f}",
                                                 f"{second.result.tokens_per_s:,.0f}"]
    assert "tokens_per_s predicted" in rows and "step time measured, ms" in rows
    assert "of which compute, ms" in rows
    assert "of which data-parallel communication, exposed, ms" in rows
    assert "The model predicts the runner-up" in page


def test_one_successful_layout_has_no_runner_up(tmp_path, runs_dir, cli):
    view = simulated_campaign(tmp_path, cli, "one", CLEAN, 1)
    data = report_data(view)
    assert data.winner is not None and data.runner_up is None
    assert "no runner-up to compare" in render(data)


COST = CostModel(MODEL_PRESETS["llama-7b"], CLUSTER_PRESETS["h100-80g"], 8)
CONFIGS = [Layout(tp=t, dp=8 // t, zero_stage=1, micro_batch_size=m,
                          grad_accum_steps=8 // m) for t in (1, 2, 4) for m in (1, 2)]


def _estimated_trials(peak: bool) -> list:
    out = []
    for i, config in enumerate(CONFIGS):
        est = COST.estimate(config)
        out.append((f"t{i}", config, TrialResult(
            status="ok", step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s,
            peak_memory_gb=0.9 * est.memory_gb_used if peak else None)))
    return out


def test_calibration_says_memory_was_not_measured_but_prunes_as_before():
    unmeasured = calibrate(COST, _estimated_trials(peak=False))
    assert unmeasured.to_dict()["memory_scale"] is None
    assert unmeasured.memory_scale == 1.0  # what pruning multiplies by: no correction
    measured = calibrate(COST, _estimated_trials(peak=True))
    assert measured.to_dict()["memory_scale"] == pytest.approx(0.9)


def test_calibrate_says_when_no_trial_measured_memory(tmp_path, runs_dir, cli, monkeypatch):
    simulated_campaign(tmp_path, cli, "clean", CLEAN, 8)
    code, out, err = cli("calibrate", "clean")
    assert code == 0, err
    assert "memory measured/predicted 1.00" in out

    run = SimulatedBackend.run
    monkeypatch.setattr(SimulatedBackend, "run", lambda *a, **k: dataclasses.replace(
        run(*a, **k), peak_memory_gb=None))
    view = simulated_campaign(tmp_path, cli, "blind", CLEAN, 8)
    code, out, err = cli("calibrate", "blind")
    assert code == 0, err
    assert "memory measured/predicted" not in out
    assert "memory not measured: no trial reported its peak" in " ".join(out.split())
    code, out, _ = cli("calibrate", "blind", "--json")
    assert json.loads(out)["memory_scale"] is None
    page = render(report_data(view))
    assert "memory not measured" in page and "memory measured/predicted" not in page
