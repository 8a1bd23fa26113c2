"""Journals with random damage (lines cut short, garbage, values of another type, lines
repeated): `status` and `best` exit 0 or 2 with one bounded line and no traceback, and every
finished trial whose `finished` line is undamaged is still counted."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import write_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.common.errors import one_line

TRIALS = 4
EXAMPLES = 1000
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(),
                        st.text(max_size=8), st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """One finished simulated campaign; each example damages a copy of its journal."""
    root = tmp_path_factory.mktemp("fuzz")
    runs = root / "runs"
    spec = write_spec(root / "f.yaml", name="f", budget={"max_trials": TRIALS},
                      backend={"kind": "simulated"}, tracking={"enabled": False})
    assert main(["run", str(spec), "--runs-dir", str(runs)]) == 0
    journal = runs / "f" / "journal.jsonl"
    return runs, journal, journal.read_bytes()


def retyped(line: bytes, data: st.DataObject) -> bytes:
    """The line with one top-level value (or one value of its result) of another type."""
    try:
        event = json.loads(line)
    except ValueError:
        return line[1:]  # already damaged: damage it further
    if not isinstance(event, dict) or not event:
        return b"{}"
    result = event.get("result")
    target = result if isinstance(result, dict) and result and data.draw(st.booleans()) else event
    key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(JSON_VALUES)
    return json.dumps(event).encode()


def damaged(lines: list[bytes], data: st.DataObject) -> tuple[list[bytes], set[int]]:
    """Damage a few lines; returns the new lines and which original lines were changed."""
    lines, hurt = list(lines), set()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["cut", "garbage", "retype", "repeat", "insert"]))
        if how == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif how == "garbage":
            lines[i] = data.draw(st.binary(max_size=40)).replace(b"\n", b" ")
        elif how == "retype" and lines[i].startswith(b"{"):
            lines[i] = retyped(lines[i], data)
        elif how == "repeat":
            lines.insert(i, lines[i])
            continue
        elif how == "insert":
            lines.insert(i, data.draw(st.binary(max_size=40)).replace(b"\n", b" "))
            continue
        hurt.add(i)
    return lines, hurt


def sound_finished(original: list[bytes], changed: list[bytes]) -> set[str]:
    """Trials whose `finished` line survives unchanged somewhere in the damaged journal."""
    kept = set(changed)
    return {json.loads(line)["trial_id"] for line in original
            if b'"finished"' in line and line in kept}


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_damage_never_costs_more_than_the_damaged_lines(campaign, cli, data):
    runs, journal, sound = campaign
    original = sound.splitlines()
    lines, _ = damaged(original, data)
    journal.write_bytes(b"\n".join(lines) + b"\n")
    try:
        code, out, err = cli("status", "f", "--json", "--runs-dir", str(runs))
        assert "Traceback" not in out + err
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.strip() == one_line(err.strip())
        else:
            assert code == 0, err
            report = json.loads(out)
            done = sum(v for k, v in report["counts"].items() if k not in ("unfinished",
                                                                           "running"))
            assert done >= len(sound_finished(original, lines))
        code, out, err = cli("best", "f", "--runs-dir", str(runs))
        assert code in (0, 2) and "Traceback" not in out + err, err
        if code == 2:
            assert len(err.strip().splitlines()) == 1
    finally:
        journal.write_bytes(sound)
        shutil.rmtree(runs / "f" / "exports", ignore_errors=True)
