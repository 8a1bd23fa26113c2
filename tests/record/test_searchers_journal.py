"""Grid and random searchers behind ask/tell, and the journal they are replayed from."""

from __future__ import annotations

from orchestrator.common.objective import Objective
from orchestrator.record.journal import Journal, TrialRecord
from orchestrator.result import TrialResult
from orchestrator.search import make_searcher
from orchestrator.space import Layout

CANDIDATES = [Layout(dp=2, zero_stage=z, micro_batch_size=m, grad_accum_steps=4 // m)
              for z in range(4) for m in (1, 2, 4)]


def drain(searcher, n=1):
    asked = []
    while batch := searcher.ask(n):
        asked += batch
    return asked


def test_grid_walks_the_space_in_order_once():
    assert drain(make_searcher("grid", CANDIDATES, Objective()), n=5) == CANDIDATES


def test_random_is_a_seeded_permutation():
    first = drain(make_searcher("random", CANDIDATES, Objective(), seed=7))
    again = drain(make_searcher("random", CANDIDATES, Objective(), seed=7))
    other = drain(make_searcher("random", CANDIDATES, Objective(), seed=8))
    assert first == again and sorted(first) == sorted(CANDIDATES) and first != other


def test_told_configs_are_not_proposed_again():
    searcher = make_searcher("grid", CANDIDATES, Objective())
    searcher.tell(CANDIDATES[0], TrialResult(status="failed", error="boom"))
    searcher.tell(CANDIDATES[1], TrialResult(status="ok", tokens_per_s=1.0))
    assert searcher.ask(1) == [CANDIDATES[2]]


def test_journal_replays_trials_and_ignores_a_torn_line(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    a, b = CANDIDATES[:2]
    first, second = TrialRecord("t0001", a, handle={"pid": 1}), TrialRecord("t0002", b, handle={"pid": 2})
    journal.record_submitted(first)
    journal.record_finished(first, TrialResult(status="ok", tokens_per_s=5.0))
    journal.record_submitted(second)
    with open(journal.path, "a") as fh:
        fh.write('{"event": "finished", "trial_id": "t00')  # killed mid-write
    trials = journal.trials()
    assert trials["t0001"].done and trials["t0001"].result.tokens_per_s == 5.0
    assert not trials["t0002"].done and trials["t0002"].handle == {"pid": 2}
    assert trials["t0002"].config == b


def test_an_event_appended_after_a_torn_line_is_readable(tmp_path):
    """A resumed controller appends after the fragment a kill left: the fragment is ended
    first, so every whole event reads back, the new one included."""
    journal = Journal(tmp_path / "journal.jsonl")
    a, b = CANDIDATES[:2]
    journal.record_submitted(TrialRecord("t0001", a, handle={"pid": 1}))
    with open(journal.path, "a") as fh:
        fh.write('{"event": "finished", "trial_id": "t00')  # killed mid-write
    second = TrialRecord("t0002", b, handle={"pid": 2})
    journal.record_submitted(second)
    journal.record_finished(second, TrialResult(status="ok", tokens_per_s=7.0))
    assert [e["event"] for e in journal.events()] == ["submitted", "submitted", "finished"]
    lines = journal.path.read_text().splitlines()
    assert lines[1] == '{"event": "finished", "trial_id": "t00' and len(lines) == 4
    trials = journal.trials()
    assert trials["t0002"].done and trials["t0002"].result.tokens_per_s == 7.0
    assert not trials["t0001"].done


def test_result_round_trip_keeps_unknown_fields_as_extra():
    result = TrialResult.from_dict({"status": "ok", "tokens_per_s": 3.0, "my_metric": 4})
    assert result.extra == {"my_metric": 4} and result.metric("my_metric") == 4.0
    assert TrialResult.from_dict(result.to_dict()) == result
