"""Resume with every searcher, `mode: min` honoured everywhere, and campaigns written by the
0.1 layout resumed by this one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import journal_events

from orchestrator.backends import SimulatedBackend
from orchestrator.common.objective import Objective
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import REPEAT
from orchestrator.result import TrialResult
from orchestrator.scheduling.controller import Controller
from orchestrator.search import ALGORITHMS
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_campaign_spec, spec_from_dict
from orchestrator.campaign_spec.planning import cost_model_for

LEGACY = Path(__file__).parent.parent / "fixtures" / "legacy"


def min_step_time_spec(runs_dir: Path, algorithm: str, max_trials: int) -> dict:
    return {
        "name": f"min-{algorithm}", "model": "llama-7b", "cluster": "a100-80g",
        "scale": {"nodes": 1, "gpus_per_node": 8, "global_batch_size": 32},
        "space": {"tp": [1, 2], "pp": [1, 2], "zero_stage": [1, 3], "micro_batch_size": [1, 2],
                  "activation_checkpointing": ["full"]},
        "objective": {"metric": "step_time_s", "mode": "min"},
        "search": {"algorithm": algorithm, "seed": 3},
        "budget": {"max_trials": max_trials},
        "backend": {"kind": "simulated", "noise": 0.0, "perturbation": 0.1, "seed": 5},
        "tracking": {"enabled": False, "runs_dir": str(runs_dir)},
    }


def test_objective_knows_max_from_min():
    fast, slow = TrialResult("ok", step_time_s=1.0), TrialResult("ok", step_time_s=2.0)
    minimise = Objective("step_time_s", "min")
    assert minimise.better(1.0, 2.0) and not minimise.better(2.0, 1.0) and minimise.better(5.0, None)
    assert minimise.result_gain(fast) > minimise.result_gain(slow)
    assert minimise.best([slow, fast], minimise.value) is fast
    assert Objective("step_time_s", "max").best([slow, fast], lambda r: r.step_time_s) is slow
    assert minimise.value(TrialResult("oom", step_time_s=0.5)) is None
    assert minimise.gain_exponent == -1 and Objective("tokens_per_s", "min").gain_exponent == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resume_with_every_searcher_and_min_mode(tmp_path, algorithm):
    """A campaign stopped after 4 trials and resumed with a larger budget proposes no config
    twice (but for the repeats of close contenders the cost-guided searcher asks for), and with the whole space measured its best is the true minimum step time."""
    runs = tmp_path / "runs"
    spec = spec_from_dict(min_step_time_spec(runs, algorithm, max_trials=4))
    first = Controller(spec).run()
    assert len([r for r in first.records if r.result.status != "infeasible"]) == 4
    saved = runs / spec.name / "spec.yaml"
    data = yaml.safe_load(saved.read_text())
    data["budget"]["max_trials"] = 64
    saved.write_text(yaml.safe_dump(data))
    summary = Controller(load_campaign_spec(runs, spec.name)).run(resume=True)
    configs = [r.config for r in summary.records if r.phase != REPEAT]  # repeats are meant
    assert len(configs) == len(set(configs)), "a config was proposed twice"
    candidates = spec.search_space().candidates()
    if algorithm != "cost-guided":  # it stops itself once the rest cannot win
        assert set(configs) == set(candidates)
    truth = SimulatedBackend(cost_model_for(spec), noise=0.0, perturbation=0.1, seed=5)
    measurable = [(c, truth.run(c, "any")) for c in candidates]
    fastest = min((c for c, result in measurable if result.ok),
                  key=lambda c: truth.run(c, "any").step_time_s)
    assert summary.best.config == fastest


def test_cost_guided_minimises_a_minimised_metric(tmp_path):
    """With an exact model, its first pick is the predicted fastest layout: a searcher that
    ignored the mode would start from the slowest."""
    data = min_step_time_spec(tmp_path / "runs", "cost-guided", max_trials=1)
    data["backend"]["perturbation"] = 0.0
    spec = spec_from_dict(data)
    summary = Controller(spec).run()
    model = cost_model_for(spec)
    fitting = [c for c in spec.search_space().candidates() if model.estimate(c).fits]
    fastest = min(fitting, key=lambda c: model.estimate(c).step_time_s)
    assert summary.best.config == fastest


def test_a_renamed_campaign_folder_is_refused_not_read_as_another(runs_dir, cli):
    """A folder moved aside (runs/a -> runs/a-old) holds campaign `a`'s spec; reading it would
    open the journal of whatever `a` is now, and `resume` would add trials to it."""
    data = min_step_time_spec(runs_dir, "grid", max_trials=2)
    data["name"] = "a"
    Controller(spec_from_dict(data)).run()
    (runs_dir / "a").rename(runs_dir / "a-old")
    data["budget"]["max_trials"] = 1
    Controller(spec_from_dict(data)).run()
    new_journal = (runs_dir / "a" / "journal.jsonl").read_text()
    for command in ("status", "resume", "best"):
        code, out, err = cli(command, "a-old")
        assert code != 0 and out == ""
        assert err.count("\n") == 1 and "is campaign 'a', not 'a-old'" in err, err
        assert "move the folder back" in err
    assert (runs_dir / "a" / "journal.jsonl").read_text() == new_journal


def _install_legacy(runs_dir: Path, name: str) -> None:
    shutil.copytree(LEGACY / name, runs_dir / name, ignore=shutil.ignore_patterns("*.complete.*"))


def _finished_trials(events: list[dict]) -> dict[str, tuple]:
    finished = {e["trial_id"]: e for e in events if e["event"] == "finished"}
    # Layouts are compared as this version reads them: fields added since 0.1 take their
    # defaults, as they do when the journal is resumed.
    return {tid: (json.dumps(Layout.from_dict(e["config"]).to_dict(), sort_keys=True),
                  e["fidelity"], e["result"]["status"],
                  e["result"].get("tokens_per_s")) for tid, e in finished.items()}


@pytest.mark.parametrize("name", ["legacy-grid", "legacy-halving"])
def test_a_campaign_of_the_previous_layout_resumes(runs_dir, cli, name):
    """Journals cut mid-campaign by the 0.1 layout (one trial in flight) resume to the same
    trials, phases and results the uninterrupted 0.1 campaign recorded."""
    _install_legacy(runs_dir, name)
    code, _, err = cli("resume", name)
    assert code == 0, err
    complete = [json.loads(line) for line in
                (LEGACY / name / "journal.complete.jsonl").read_text().splitlines()]
    resumed = _finished_trials(journal_events(runs_dir / name))
    recorded = _finished_trials(complete)
    cut = [json.loads(line) for line in (LEGACY / name / "journal.jsonl").read_text().splitlines()]
    before_cut = {e["trial_id"] for e in cut if e["event"] == "finished"}
    # Trials run after the cut are simulated by today's cost model, so their throughputs differ
    # from 0.1's; which trials run, in which phase and with which status does not.
    assert {t: v[:3] for t, v in resumed.items()} == {t: v[:3] for t, v in recorded.items()}
    assert {t: resumed[t] for t in before_cut} == {t: recorded[t] for t in before_cut}
    view = CampaignView.open(runs_dir, name)
    expected_best = {"legacy-grid": "t0001", "legacy-halving": "t0005"}[name]
    assert view.best().trial_id == expected_best
    if name == "legacy-halving":
        phases = {r.trial_id: r.phase for r in view.records()}
        assert phases["t0001"] == "screen" and phases["t0005"] == "confirm"
        assert phases["t0011"] == "scaling"
