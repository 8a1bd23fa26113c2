"""`paratune calibrate --from runs/NAME/journal.jsonl`: another campaign's trials become a
cluster profile with no new trials, which a spec then names as its `cluster: FILE`."""

from __future__ import annotations

import json
import statistics

import pytest
import yaml

from orchestrator.costmodel.cluster_fit import calibrated_coefficients
from orchestrator.campaign_spec import load_cluster, load_spec
from orchestrator.campaign_spec.planning import cost_model_for


@pytest.fixture
def campaign(tmp_path, runs_dir, cli):
    """A simulated campaign of 12 trials on h100-80g, some of which fail."""
    spec = tmp_path / "history.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "history", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 8, "global_batch_size": 512},
        "space": {"tp": [1, 2, 4, 8], "zero_stage": [1, 3], "micro_batch_size": [1, 2, 4]},
        "search": {"algorithm": "random", "seed": 3}, "budget": {"max_trials": 14},
        "backend": {"kind": "simulated", "seed": 5, "noise": 0.05, "failure_rate": 0.2},
        "tracking": {"enabled": False}}))
    assert cli("run", str(spec))[0] == 0
    return spec


def test_a_journal_becomes_a_profile_that_a_spec_prices_with(tmp_path, runs_dir, cli, campaign):
    profile = tmp_path / "calibrated.yaml"
    code, out, err = cli("calibrate", "--from", str(runs_dir / "history" / "journal.jsonl"),
                         "--out", str(profile), "--json")
    assert code == 0, err
    data = json.loads(out)
    code, status, _ = cli("status", "history", "--json")
    trials = json.loads(status)["counts"]
    assert data["rows"] == trials.get("ok", 0) and data["rows"] >= 4
    assert data["unpriced"] == {f"ended {status}": n for status, n in trials.items()
                                if status != "ok"}
    assert data["unpriced"], "the campaign has trials that did not end ok"
    figures = data["figures"]
    assert figures["held_out"] is not None
    assert set(figures["stock"]) == {"llama-7b on 64 x h100-80g", "all rows"}

    # A spec naming the file prices with the fit, and so does the campaign's own calibrate
    # given it as its preset (no refit): it shows the fit's in-sample error.
    spec = load_spec(campaign, [f"cluster={profile}"])
    assert cost_model_for(spec).coefficients == calibrated_coefficients(load_cluster(
        str(profile), "cluster"))
    assert spec.cluster.calibration.fitted_on.startswith("paratune calibrate --from")
    code, out, err = cli("calibrate", "history", "--cluster", str(profile), "--json")
    assert code == 0, err
    # Its errors are of throughput, the figures' of step time (as docs/validation.md's).
    step_errors = [abs(1 / (1 + t["error"]) - 1) for t in json.loads(out)["per_trial"]]
    in_sample = figures["calibrated"]["all rows"]["median_abs_error"]
    assert statistics.median(step_errors) == pytest.approx(in_sample, rel=1e-9)


def test_the_campaign_folder_names_its_journal_too(tmp_path, runs_dir, cli, campaign):
    code, out, err = cli("calibrate", "--from", str(runs_dir / "history"), "--out",
                         str(tmp_path / "p.yaml"))
    assert code == 0, err
    assert "wrote" in out and (tmp_path / "p.yaml").is_file()
    assert "stock / fitted (in sample) / held out" in " ".join(out.split()) and "llama-7b" in out


@pytest.mark.parametrize("args,message", [
    (["history", "--from", "x.csv"], "give a CAMPAIGN or --from FILE, not both"),
    (["history", "--out", "p.yaml"], "--out: only with --from FILE"),
    (["--from", "nowhere/journal.jsonl"], "no such file"),
    (["--from", "ELSEWHERE/journal.jsonl"], "no spec.yaml in"),
    (["--from", "ELSEWHERE/notes.txt"], "not a campaign's journal"),
    (["--from", "RUNS/history/journal.jsonl", "--out", "RUNS/history/journal.jsonl"],
     "a preset file's name ends in .yaml"),
])
def test_bad_calibrate_from_input_is_one_line(tmp_path, runs_dir, cli, campaign, args, message):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "journal.jsonl").write_bytes((runs_dir / "history" / "journal.jsonl")
                                              .read_bytes())
    (elsewhere / "notes.txt").write_text("x")
    args = [a.replace("ELSEWHERE", str(elsewhere)).replace("RUNS", str(runs_dir)) for a in args]
    code, _, err = cli("calibrate", *args)
    assert code == 2 and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_too_few_trials_to_fit_say_so(tmp_path, runs_dir, cli):
    spec = tmp_path / "few.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "few", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 8, "global_batch_size": 512}, "space": {"tp": [1, 2]},
        "search": {"algorithm": "grid"}, "budget": {"max_trials": 2},
        "backend": {"kind": "simulated"},
        "tracking": {"enabled": False}}))
    assert cli("run", str(spec))[0] == 0
    code, _, err = cli("calibrate", "--from", str(runs_dir / "few"), "--out",
                       str(tmp_path / "p.yaml"))
    assert code == 2 and "priced, a fit needs 3 or more" in err, err
