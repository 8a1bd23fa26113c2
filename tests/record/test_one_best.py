"""One best: the live display, `paratune status` and `paratune best`, the report (its best and
its convergence curve), patience, the campaign view and the service's summary name the same
trial and value, on a simulated campaign with screens (successive halving) and repeats of a
layout, before and after `paratune resume`.

The campaign is built so that every shortcut disagrees: the highest raw value is a screen's
(a few steps), the layout with the best single measurement loses on the mean of its repeats,
and trial IDs are not in the order the trials ended. Under `mode: min` the same speeds make
the same winner.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import yaml
from conftest import write_spec

from dashboards.report_data import report_data
from orchestrator.backends import SimulatedBackend
from orchestrator.cli import campaigns
from orchestrator.cli.live_display import CampaignProgress
from orchestrator.common.objective import Objective
from orchestrator.record.best import BestSoFar, best_record
from orchestrator.record.budget import Tally
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import CONFIRM, REPEAT, SCREEN, TrialRecord
from orchestrator.result import TrialResult
from orchestrator.server.campaign_summary import ProgressCache
from orchestrator.space import Layout
from orchestrator.campaign_spec.planning import cost_model_for

NAME = "one-best"
OBJECTIVES = {"max": {"metric": "tokens_per_s", "mode": "max"},
              "min": {"metric": "step_time_s", "mode": "min"}}
PATIENCE = 3


@pytest.fixture
def displays(monkeypatch) -> list:
    """Every live display the CLI opens, with what it showed once a resume had read the
    trials that ended before it (`at_resume`)."""
    opened = []

    class Recorded(CampaignProgress):
        at_resume = None

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            opened.append(self)

        def already_done(self, records):
            super().already_done(records)
            self.at_resume = best_on_display(self)

    monkeypatch.setattr(campaigns, "CampaignProgress", Recorded)
    return opened


def best_on_display(display: CampaignProgress) -> tuple[str | None, float | None, str]:
    """A live display's best: its trial, its value and the status line it prints."""
    record = display.best.record
    return (record.trial_id if record else None, display.best.value,
            display.progress.tasks[0].fields["status"])


def measured_like(backend: SimulatedBackend, config, trial_id: str, speed: float) -> TrialResult:
    """What the simulated backend measures for `config`, made `speed` times as fast."""
    result = backend.run(config, trial_id)
    times = [t / speed for t in result.step_times_s]
    return dataclasses.replace(
        result, tokens_per_s=result.tokens_per_s * speed,
        tokens_per_s_per_gpu=result.tokens_per_s_per_gpu * speed,
        tflops_per_gpu=result.tflops_per_gpu * speed, mfu=result.mfu * speed,
        step_time_s=result.step_time_s / speed, step_time_p90_s=result.step_time_p90_s / speed,
        step_times_s=times, extra={"simulated_duration_s": sum(times)})


def run_screened_campaign(tmp_path, cli, objective: dict) -> CampaignView:
    """Screens and their confirmations, measured by the simulated backend (noise-free, so the
    fastest layout's speed is known)."""
    spec = write_spec(tmp_path / "s.yaml", name=NAME, objective=objective,
                      backend={"kind": "simulated", "noise": 0.0},
                      search={"algorithm": "grid", "fidelity": {
                          "screening_steps": 2, "keep_fraction": 0.5, "min_screened": 2}},
                      budget={"max_trials": 6, "max_concurrent": 1},
                      tracking={"enabled": False})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    view = CampaignView.open(tmp_path / "runs", NAME)
    assert {r.phase for r in view.records()} == {SCREEN, CONFIRM}
    return view


def add_contested_trials(view: CampaignView) -> dict[str, str]:
    """Journal four more trials, as a controller of this campaign would have, at multiples of
    the fastest layout's speed: a screen of X at 10 (the best raw value), B confirmed at 3 (the
    best single measurement) and repeated at 0.8, C confirmed at 2. B's mean beats every
    other layout's but C's (in tokens/s, 1.9; in step time, 0.79 of the fastest layout's
    against C's 0.5), so C improves on the best's mean though not on B's best measurement.
    They end in the order X, B, B again, C, which is not the order of their IDs. Returns the
    trial IDs by role."""
    records = view.records()
    backend = SimulatedBackend(cost_model_for(view.spec), noise=0.0)
    candidates = view.spec.search_space().candidates()
    fastest = max(backend.run(c, "any").tokens_per_s for c in candidates)
    confirmed = {r.config for r in records if r.phase == CONFIRM}
    screened = {r.config for r in records if r.phase == SCREEN}
    x = next(c for c in candidates if c not in screened | confirmed)
    b, c = [c for c in candidates if c not in confirmed | {x}][:2]
    n = max(int(r.trial_id[1:]) for r in records)
    ids = {role: f"t{n + i:04d}" for i, role in enumerate(("x", "b", "c", "b_repeat"), 1)}
    ended = [("x", x, SCREEN, 10.0), ("b", b, CONFIRM, 3.0), ("b_repeat", b, REPEAT, 0.8),
             ("c", c, CONFIRM, 2.0)]
    for role, config, phase, speed in ended:
        record = TrialRecord(ids[role], config, phase=phase)
        view.journal.record_submitted(record)
        base = backend.run(config, "any").tokens_per_s
        view.journal.record_finished(
            record, measured_like(backend, config, ids[role], speed * fastest / base))
    return ids


def readers(view: CampaignView, cli, runs_dir) -> dict[str, tuple[str, float]]:
    """The best trial and its value, as each reader of the campaign names it."""
    records, metric = view.records(), view.objective.metric
    of = lambda record: (record.trial_id, record.result.metric(metric))  # noqa: E731
    code, out, err = cli("best", NAME, "--format", "yaml", "--json")
    assert code == 0, err
    best = json.loads(out)
    code, out, err = cli("status", NAME, "--json")
    assert code == 0, err
    status = json.loads(out)["best"]
    report = report_data(view)
    service = ProgressCache(runs_dir).progress(NAME).best
    return {
        "campaign view": of(view.best(records)),
        "paratune best": (best["trial_id"], best[metric]),
        "paratune status": (status["trial_id"], status[metric]),
        "report": (report.best.trial_id, report.best.value),
        "report curve": (report.convergence[-1].best_trial_id, report.convergence[-1].best),
        "patience": of(Tally.of(records, view.objective).best.record),
        "service": (service["trial_id"], service["value"]),
    }


@pytest.mark.parametrize("mode", OBJECTIVES)
def test_every_reader_names_the_same_best_before_and_after_a_resume(
        tmp_path, runs_dir, cli, displays, mode):
    view = run_screened_campaign(tmp_path, cli, OBJECTIVES[mode])
    ids = add_contested_trials(view)
    records, metric = view.records(), view.objective.metric
    values = {r.trial_id: r.result.metric(metric) for r in records}
    expected = (ids["c"], values[ids["c"]])

    before = readers(view, cli, runs_dir)
    assert before == dict.fromkeys(before, expected)
    # The curve in the order the trials ended; B's repeat leaves B the best (at its mean),
    # shown by its measurement nearest that mean, until C beats that mean.
    curve = report_data(view).convergence
    first_run_best = curve[-5].best_trial_id
    assert [(p.trial_id, p.best_trial_id, p.best) for p in curve[-4:]] == [
        (ids["x"], first_run_best, values[first_run_best]),
        (ids["b"], ids["b"], values[ids["b"]]),
        (ids["b_repeat"], ids["b"], values[ids["b"]]),
        (ids["c"], ids["c"], values[ids["c"]])]
    assert view.budget(records).since_improvement == 0  # C beat the mean B fell to

    saved = view.dir / "spec.yaml"
    data = yaml.safe_load(saved.read_text())
    data["budget"].update(max_trials=30, patience=PATIENCE)
    saved.write_text(yaml.safe_dump(data))
    code, _, err = cli("resume", NAME)
    assert code == 0, err
    display, status_line = displays[-1], f"best {metric} {expected[1]:,.4g}"
    assert display.at_resume == (*expected, status_line)

    after = readers(view, cli, runs_dir)
    assert after == dict.fromkeys(after, expected)
    assert best_on_display(display) == (*expected, status_line)
    # Patience counts on from C's improvement, as the journal replays it: PATIENCE more
    # trials, none better, then the campaign stops for want of improvement.
    resumed = [r for r in view.records() if r.trial_id > ids["b_repeat"]]
    assert (len(resumed), view.phase(), view.budget().since_improvement) == (
        PATIENCE, ("finished", f"no improvement in {PATIENCE} trials (patience {PATIENCE})"),
        PATIENCE)


A, B, C = (Layout(dp=2, zero_stage=z, micro_batch_size=4) for z in (0, 1, 2))


def ended(trial_id: str, layout: Layout, phase: str, tokens_per_s: float,
          finished_at: float) -> TrialRecord:
    record = TrialRecord(trial_id, layout, phase=phase, finished_at=finished_at)
    record.result = TrialResult(status="ok", tokens_per_s=tokens_per_s, world_size=2)
    return record


def test_the_best_does_not_depend_on_the_order_records_are_read_in():
    """B's two measurements are equally far from their mean: the first by trial ID stands
    for it, whichever order the records come in (by ID, as the campaign view reads them, or
    in the order they ended, as the live display and patience do)."""
    records = [ended("t0001", A, SCREEN, 5000.0, 1.0), ended("t0002", B, CONFIRM, 1200.0, 4.0),
               ended("t0003", C, CONFIRM, 1000.0, 2.0), ended("t0004", B, REPEAT, 1600.0, 3.0)]
    objective = Objective("tokens_per_s", "max")
    for order in itertools.permutations(records):
        assert best_record(list(order), objective).trial_id == "t0002"
    finished_in_order = sorted(records, key=lambda r: r.finished_at)
    assert Tally.of(records, objective).best.record.trial_id == "t0002"
    best = BestSoFar(objective)
    for record in finished_in_order:
        best.add(record)
    assert best.record.trial_id == "t0002" and best.value == 1200.0
