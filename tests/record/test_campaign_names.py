"""A campaign name on the command line as a person types it: `status`, `best` and `report`
with the start of a name mean the latest started campaign whose name begins with it (`make
demo` names its campaign `quickstart-<date-time>`), and without a name (`best`, `report`)
the latest started campaign; each says which on stderr. A name that is none of these gets a
one-line error with "did you mean"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLES

from orchestrator.cli import main
from orchestrator.common.errors import CampaignStateError
from orchestrator.record.journal import Journal

# Started first, though its name sorts last: "latest" goes by time, not by name.
FIRST, LATEST = "quickstart-20261207-090000", "quickstart-20261206-155320"
CHEAP = ["--set", "backend.kind=simulated", "--set", "budget.max_trials=1",
         "--set", "tracking.enabled=false"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two demo-named simulated campaigns of one trial each, and an unrelated one."""
    runs = tmp_path_factory.mktemp("names") / "runs"
    for name in (FIRST, LATEST, "other"):
        code = main(["run", str(EXAMPLES / "quickstart.yaml"), "--set", f"name={name}", *CHEAP,
                     "--runs-dir", str(runs)])
        assert code == 0
    return runs


def test_the_start_of_a_name_means_the_latest_campaign_it_begins(runs, cli):
    code, out, err = cli("status", "quickstart", "--runs-dir", str(runs), "--json")
    assert code == 0, err
    assert json.loads(out)["campaign"] == LATEST
    assert err.count("\n") == 1 and LATEST in err and "'quickstart'" in err


def test_best_and_report_without_a_name_take_the_latest_campaign(runs, cli, tmp_path):
    code, out, err = cli("best", "--runs-dir", str(runs), "--json")
    assert code == 0, err
    assert json.loads(out)["campaign"] == "other" and "other" in err
    report = tmp_path / "r.html"
    code, out, err = cli("report", "quickstart", "-o", str(report),
                              "--runs-dir", str(runs))
    assert code == 0, err
    assert LATEST in report.read_text() and LATEST in err


def test_a_whole_name_is_taken_as_it_is(runs, cli):
    code, out, err = cli("status", FIRST, "--runs-dir", str(runs), "--json")
    assert code == 0 and json.loads(out)["campaign"] == FIRST and err == ""


def test_an_unknown_name_gets_one_line_with_did_you_mean(runs, cli):
    code, _, err = cli("status", "quikstart-20261206-155320", "--runs-dir", str(runs))
    assert code == 2 and err.count("\n") == 1
    assert f"did you mean: {LATEST}" in err
    code, _, err = cli("best", "zzz", "--runs-dir", str(runs))
    assert code == 2 and err.count("\n") == 1 and "no campaign 'zzz'" in err
    assert "did you mean" not in err


def test_resume_takes_only_a_whole_name_and_offers_the_ones_it_begins(runs, cli):
    code, _, err = cli("resume", "quickstart", "--runs-dir", str(runs))
    assert code == 2 and err.count("\n") == 1
    assert FIRST in err and LATEST in err and "did you mean" in err


def _started(runs: Path, name: str, at: float) -> None:
    (runs / name).mkdir(parents=True)
    (runs / name / "spec.yaml").write_text(f"name: {name}\n")
    Journal(runs / name / "journal.jsonl").append("campaign", name=name, started_at=at)


def test_campaigns_started_at_the_same_time_are_not_guessed_between(tmp_path):
    from orchestrator.record.campaign_choice import choose_campaign

    _started(tmp_path, "demo-a", 1_800_000_000.0)
    _started(tmp_path, "demo-b", 1_800_000_000.0)
    _started(tmp_path, "demo-0", 1_700_000_000.0)
    with pytest.raises(CampaignStateError, match="demo-a, demo-b started at the same time"):
        choose_campaign(tmp_path, "demo")
    assert choose_campaign(tmp_path, "demo-0")[0] == "demo-0"
