"""One best: the live display, `paratune status` and `paratune best`, the report (its best and
its convergence curve), patience and the service's summary name the same trial and value, on a
campaign with screens and repeats, read as a resume reads it.

The campaign is built so that every shortcut disagrees: the highest raw value is a screen's
(a few steps), the layout with the highest single measurement loses on the mean of its repeats,
and trial IDs are not in the order trials ended."""

from __future__ import annotations

import io
import json

from conftest import write_spec
from rich.console import Console

from dashboards.report_data import report_data
from orchestrator.cli.live_display import CampaignProgress
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import CONFIRM, REPEAT, SCREEN, Journal, TrialRecord
from orchestrator.result import TrialResult
from orchestrator.server.campaign_summary import ProgressCache
from orchestrator.space import ParallelConfig

A, B, C = (ParallelConfig(dp=2, zero_stage=z, micro_batch_size=4) for z in (0, 1, 2))
# (trial ID, layout, phase, tokens/s), in the order the trials ended.
ENDED = [
    ("t0001", A, SCREEN, 2000.0),  # the highest raw value: a screen
    ("t0003", C, CONFIRM, 1400.0),  # the best: no other layout's mean is higher
    ("t0002", B, CONFIRM, 1500.0),  # the highest single full measurement...
    ("t0004", B, REPEAT, 900.0),  # ...whose mean (1200) its repeat brings below C's
    ("t0005", A, CONFIRM, 1300.0),
]


def _campaign(tmp_path, runs_dir, cli) -> CampaignView:
    """A campaign the controller saved, its journal then holding the trials above."""
    spec = write_spec(tmp_path / "s.yaml", name="one-best", backend={"kind": "simulated"},
                      search={"algorithm": "grid",
                              "fidelity": {"screening_steps": 2, "min_screened": 1}},
                      budget={"max_trials": 1, "patience": 10}, tracking={"enabled": False})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    journal_path = runs_dir / "one-best" / "journal.jsonl"
    campaign = next(line for line in journal_path.read_text().splitlines()
                    if json.loads(line)["event"] == "campaign")
    journal_path.write_text(campaign + "\n")
    journal = Journal(journal_path)
    for trial_id, config, phase, value in ENDED:
        record = TrialRecord(trial_id, config, phase=phase)
        journal.record_submitted(record)
        journal.record_finished(record, TrialResult(status="ok", tokens_per_s=value,
                                                    world_size=2))
    return CampaignView.open(runs_dir, "one-best")


def test_every_reader_names_the_same_best(tmp_path, runs_dir, cli):
    view = _campaign(tmp_path, runs_dir, cli)
    records = view.records()
    assert [r.phase for r in sorted(records, key=lambda r: r.trial_id)] == [
        SCREEN, CONFIRM, CONFIRM, REPEAT, CONFIRM]

    summary = view.summary()
    assert (summary.best.trial_id, summary.best.result.tokens_per_s) == ("t0003", 1400.0)

    code, out, err = cli("best", "one-best", "--format", "yaml", "--json")
    assert code == 0, err
    best = json.loads(out)
    assert (best["trial_id"], best["tokens_per_s"]) == ("t0003", 1400.0)

    code, out, err = cli("status", "one-best", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert (status["best"]["trial_id"], status["best"]["tokens_per_s"]) == ("t0003", 1400.0)

    data = report_data(view)
    assert data.best.trial_id == "t0003"
    assert [p.trial_id for p in data.convergence] == [t for t, *_ in ENDED]
    assert [p.best for p in data.convergence] == [2000.0, 1400.0, 1500.0, 1400.0, 1400.0]

    display = CampaignProgress(Console(file=io.StringIO(), width=200), view.spec)
    display.already_done(records)  # as `paratune resume` starts it
    assert display.best.record.trial_id == "t0003" and display.best.value == 1400.0
    assert display.progress.tasks[0].fields["status"] == "best tokens_per_s 1,400"

    service_best = ProgressCache(runs_dir).progress("one-best").best
    assert (service_best["trial_id"], service_best["value"]) == ("t0003", 1400.0)


def test_patience_counts_in_the_order_trials_ended(tmp_path, runs_dir, cli):
    """Improvements, in finish order: the first screen, the first full measurement (C), B's
    single measurement; then B's repeat and A's confirmation leave C the best: 2 trials
    without improvement (counting by trial ID, or by raw value, says 4)."""
    view = _campaign(tmp_path, runs_dir, cli)
    budget = view.budget(view.records())
    assert budget.since_improvement == 2
    code, out, _ = cli("status", "one-best", "--json")
    assert json.loads(out)["budget"]["since_improvement"] == 2
