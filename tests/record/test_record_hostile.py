"""A journal line written to hurt its readers (a number no float holds, a value nested
thousands deep, NaN or Infinity where a reader computes with the value) costs that line, never
the campaign nor its neighbours: `status` of every campaign, `status NAME --json` and the
service's campaign summary answer with the sound lines' trials, in valid JSON, and name the
line they skipped."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from conftest import write_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.server.campaign_summary import ProgressCache

TRIALS = 3
HUGE = st.integers(310, 5000).map(lambda digits: "9" * digits)  # past a float's 1.8e308
BEYOND_FLOAT = st.one_of(HUGE, st.just("-" + "9" * 400), st.just("1e400"), st.just("-2.5e999"))
NOT_FINITE = st.sampled_from(["NaN", "Infinity", "-Infinity"])
# Numbers a float holds whose products and sums do not (a world of 1.5e308 ranks), or that are
# no time, world or duration at all.
OUT_OF_RANGE = st.sampled_from(["1.5e308", "9" * 308, "-5", "4e11"])
# Where a reader computes with a number: the event's time, the campaign's start, and what a
# finished trial's GPU-hours are made of.
COMPUTED_ON = ["time", "started_at", "result.world_size", "result.simulated_duration_s",
               "result.extra.simulated_duration_s"]
# Values only shown or checked (a NaN loss is what a diverged run measures; a config the trial's
# first event already gave is not read again).
SHOWN = ["result.tokens_per_s", "result.loss_last", "result.step_times_s.0", "config.tp"]


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory):
    """Two finished simulated campaigns; each example damages a copy of the first's journal."""
    root = tmp_path_factory.mktemp("hostile")
    runs = root / "runs"
    for name in ("h", "other"):
        spec = write_spec(root / f"{name}.yaml", name=name, budget={"max_trials": TRIALS},
                          backend={"kind": "simulated"}, tracking={"enabled": False})
        assert main(["run", str(spec), "--runs-dir", str(runs)]) == 0
    journal = runs / "h" / "journal.jsonl"
    return runs, journal, journal.read_bytes()


def template(sound: bytes, field: str) -> dict:
    """A sound event that holds `field`: the campaign's start, or a finished trial."""
    events = [json.loads(line) for line in sound.splitlines()]
    kind = "campaign" if field == "started_at" else "finished"
    return next(e for e in events if e["event"] == kind)


def with_token(event: dict, field: str, token: str) -> bytes:
    """The event as a JSON line whose `field` (a dotted path) is the raw JSON `token`."""
    marker = "__HOSTILE__"
    *parents, last = field.split(".")
    node = event
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = marker
    else:
        node[last] = marker
    return json.dumps(event).replace(f'"{marker}"', token).encode()


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@st.composite
def hostile_lines(draw, sound: bytes) -> tuple[bytes, bool]:
    """A hostile line, and whether every reader must skip it (else it may count as data)."""
    how = draw(st.sampled_from(["beyond float", "not finite computed", "not finite shown",
                                "out of range", "deep", "campaign_end"]))
    if how == "campaign_end":  # the line that took down the service's campaign list
        stamp = draw(st.one_of(HUGE, NOT_FINITE))
        return f'{{"event":"campaign_end","stop_reason":"x","time":{stamp}}}'.encode(), True
    if how == "deep":
        field = draw(st.sampled_from(["config.tp", "result.extra.profile", "handle.pid"]))
        return with_token(template(sound, field), field, nested(draw(st.integers(40, 3000)))), True
    if how == "beyond float":
        field = draw(st.sampled_from(COMPUTED_ON + SHOWN))
        return with_token(template(sound, field), field, draw(BEYOND_FLOAT)), True
    if how == "not finite shown":
        field = draw(st.sampled_from(SHOWN))
        return with_token(template(sound, field), field, draw(NOT_FINITE)), False
    field = draw(st.sampled_from(COMPUTED_ON))
    token = draw(OUT_OF_RANGE if how == "out of range" else NOT_FINITE)
    return with_token(template(sound, field), field, token), True


def strict_json(text: str):
    """JSON as a browser reads it: NaN and Infinity are not JSON."""
    def refuse(token):
        raise AssertionError(f"{token} in the output")
    return json.loads(text, parse_constant=refuse)


def done(report: dict) -> int:
    return sum(v for k, v in report["counts"].items() if k not in ("running", "unfinished"))


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_hostile_line_costs_that_line_alone(campaigns, capsys, caplog, data):
    runs, journal, sound = campaigns
    line, skipped = data.draw(hostile_lines(sound))
    lines = sound.splitlines()
    lines.insert(data.draw(st.integers(1, len(lines))), line)
    journal.write_bytes(b"\n".join(lines) + b"\n")
    caplog.set_level(logging.WARNING)
    caplog.clear()
    try:
        code, out, err = cli(capsys, "status", "--json", "--runs-dir", str(runs))
        assert code == 0 and "Traceback" not in out + err, err
        listing = strict_json(out)
        assert [c["campaign"] for c in listing["campaigns"]] == ["h", "other"]
        assert all(done(c) == TRIALS for c in listing["campaigns"])

        code, out, err = cli(capsys, "status", "h", "--json", "--runs-dir", str(runs))
        assert code == 0 and "Traceback" not in out + err, err
        report = strict_json(out)
        assert done(report) == TRIALS
        if skipped:
            assert report["journal_lines_skipped"] == 1
            named = [r.getMessage() for r in caplog.records if "skipped 1 line" in r.getMessage()]
            assert named and str(journal) in named[0] and "\n" not in named[0]

        code, out, err = cli(capsys, "status", "--runs-dir", str(runs))
        assert code == 0 and "Traceback" not in out + err, err

        progress = ProgressCache(runs).progress("h", TRIALS)  # what GET /api/campaigns shows
        assert progress.problem is None and progress.trials == TRIALS
        json.dumps(progress.to_dict(), allow_nan=False)  # as the service renders it
    finally:
        journal.write_bytes(sound)
        shutil.rmtree(runs / "h" / "exports", ignore_errors=True)
