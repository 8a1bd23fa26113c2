"""`paratune resume NAME --set budget.KEY=VALUE` extends a finished campaign: more trials run,
the saved spec keeps the new budget for a later resume, and the journal records old -> new. Any
key but the budget's is refused in one line, with nothing changed."""

from __future__ import annotations

import json

from conftest import EXAMPLES, journal_events

CHEAP = ["--set", "backend.kind=simulated", "--set", "tracking.enabled=false"]


def ran(campaign_dir) -> int:
    """Trials that ran to a result (pruned layouts never ran)."""
    return sum(e["event"] == "finished" and e["result"]["status"] != "infeasible"
               for e in journal_events(campaign_dir))


def test_a_finished_campaign_resumed_with_a_larger_budget_runs_more_trials(runs_dir, cli):
    code, _, err = cli("run", str(EXAMPLES / "quickstart.yaml"), *CHEAP,
                            "--set", "budget.max_trials=2")
    assert code == 0, err
    campaign = runs_dir / "quickstart"
    assert ran(campaign) == 2
    hint = "extend it with `paratune resume quickstart --set budget.max_trials=...`"
    assert hint in err  # the run's last line, and status, say how to extend it
    assert hint in cli("status", "quickstart")[1]
    code, _, err = cli("resume", "quickstart", "--set", "budget.max_trials=4")
    assert code == 0, err
    assert ran(campaign) == 4
    assert "budget.max_trials 2 -> 4" in err
    changes = [e for e in journal_events(campaign) if e["event"] == "budget_changed"]
    assert [(e["key"], e["old"], e["new"]) for e in changes] == [("budget.max_trials", 2, 4)]
    # A later resume keeps the new budget: nothing more runs, and status counts against it.
    code, _, err = cli("resume", "quickstart")
    assert code == 0, err
    assert ran(campaign) == 4
    code, out, _ = cli("status", "quickstart", "--json")
    assert json.loads(out)["max_trials"] == 4


def test_a_key_outside_the_budget_is_refused_in_one_line(runs_dir, cli):
    code, _, err = cli("run", str(EXAMPLES / "quickstart.yaml"), *CHEAP,
                            "--set", "budget.max_trials=1")
    assert code == 0, err
    campaign = runs_dir / "quickstart"
    spec, journal = (campaign / "spec.yaml").read_text(), (campaign / "journal.jsonl").read_text()
    for item in ("search.seed=3", "budget=9"):
        code, _, err = cli("resume", "quickstart", "--set", "budget.max_trials=5",
                                "--set", item)
        assert code == 2 and err.count("\n") == 1, err
        assert f"--set {item.partition('=')[0]}:" in err and "only budget keys" in err
    code, _, err = cli("resume", "quickstart", "--set", "budget.max_trials=many")
    assert code == 2 and err.count("\n") == 1 and "budget.max_trials" in err
    assert (campaign / "spec.yaml").read_text() == spec
    assert (campaign / "journal.jsonl").read_text() == journal
