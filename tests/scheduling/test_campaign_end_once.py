"""A campaign's end is journaled once: `resume` of a campaign that has ended (what the service
does for every campaign when it restarts after a kill) runs nothing and writes no second
`campaign_end`; a resume that runs more trials ends the campaign again, after them."""

from __future__ import annotations

from conftest import journal_events, write_spec


def ends(runs_dir, name: str) -> list[int]:
    """Where `campaign_end` events stand among the journal's events."""
    events = journal_events(runs_dir / name)
    return [i for i, e in enumerate(events) if e["event"] == "campaign_end"]


def test_resume_of_an_ended_campaign_writes_no_second_end(tmp_path, runs_dir, cli):
    spec = write_spec(tmp_path / "e.yaml", name="ended", budget={"max_trials": 2},
                      backend={"kind": "simulated"}, tracking={"enabled": False})
    assert cli("run", str(spec))[0] == 0
    events = journal_events(runs_dir / "ended")
    assert ends(runs_dir, "ended") == [len(events) - 1]
    for _ in range(2):
        code, _, err = cli("resume", "ended")
        assert code == 0, err
        assert journal_events(runs_dir / "ended") == events

    saved = runs_dir / "ended" / "spec.yaml"
    saved.write_text(saved.read_text().replace("max_trials: 2", "max_trials: 3"))
    assert cli("resume", "ended")[0] == 0
    after = journal_events(runs_dir / "ended")
    assert ends(runs_dir, "ended") == [len(events) - 1, len(after) - 1]
    assert sum(e["event"] == "finished" for e in after) == 3
