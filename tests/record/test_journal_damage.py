"""A damaged journal costs the damaged line, never the campaign: every reader (`status` of
one campaign and of all, `best`, `report`, `resume`) answers with the trials the sound lines
hold, names what it skipped in one line, and never shows a traceback. A journal that is not
the campaign's own (a symbolic link, a directory, another campaign's copy) is refused in one
line, and a journal that cannot be written to stops the campaign in one line, losing nothing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import write_spec

from orchestrator.record.journal import Journal

TRIALS = 3


def finished_campaign(tmp_path: Path, cli, name: str = "dmg", trials: int = TRIALS) -> Path:
    spec = write_spec(tmp_path / f"{name}.yaml", name=name, budget={"max_trials": trials},
                      backend={"kind": "simulated"}, tracking={"enabled": False})
    assert cli("run", str(spec))[0] == 0
    return Path(os.environ["PARATUNE_RUNS_DIR"]) / name / "journal.jsonl"


def insert_line(journal: Path, line: bytes) -> None:
    """The bad line goes in the middle, among sound ones."""
    lines = journal.read_bytes().splitlines(keepends=True)
    lines.insert(len(lines) // 2, line + b"\n")
    journal.write_bytes(b"".join(lines))


def a_finished_event(journal: Path) -> dict:
    return next(e for e in Journal(journal).events() if e["event"] == "finished")


def bad_line(journal: Path, case: str) -> bytes:
    event = a_finished_event(journal)
    changed = {
        "missing event": lambda e: e.pop("event"),
        "missing time": lambda e: e.pop("time"),
        "missing config": lambda e: e.pop("config"),
        "config of the wrong type": lambda e: e.update(config="tp2-pp1"),
        "result a list": lambda e: e.update(result=[1]),
        "unknown status": lambda e: e["result"].update(status="exploded"),
        "unknown phase": lambda e: e.update(fidelity="warmup"),
        "integer trial id": lambda e: e.update(trial_id=7),
    }
    if case in changed:
        changed[case](event)
        return json.dumps(event).encode()
    return {"null": b"null", "a number": b"5", "a list": b"[1, 2]",
            "not UTF-8": b'{"event": "finished", "\xff\xfe": 1}'}[case]


CASES = ["null", "a number", "a list", "not UTF-8", "missing event", "missing time",
         "missing config", "config of the wrong type", "result a list", "unknown status",
         "unknown phase", "integer trial id"]


def done_trials(report: dict) -> int:
    return sum(v for k, v in report["counts"].items() if k not in ("running", "unfinished"))


@pytest.mark.parametrize("case", CASES)
def test_every_reader_skips_one_bad_line_and_names_it(tmp_path, runs_dir, cli, caplog, case):
    journal = finished_campaign(tmp_path, cli)
    finished_campaign(tmp_path, cli, name="other", trials=1)
    insert_line(journal, bad_line(journal, case))
    caplog.set_level(logging.WARNING)
    code, out, err = cli("status", "dmg", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert done_trials(report) == TRIALS and report["journal_lines_skipped"] == 1
    warnings = [r.getMessage() for r in caplog.records if "skipped 1 line" in r.getMessage()]
    assert warnings and "\n" not in warnings[0] and str(journal) in warnings[0]
    code, out, _ = cli("status", "--json")
    assert code == 0 and [c["campaign"] for c in json.loads(out)["campaigns"]] == ["dmg", "other"]
    for command in (("best", "dmg"), ("report", "dmg", "-o", str(tmp_path / "r.html")),
                    ("resume", "dmg")):
        code, out, err = cli(*command)
        assert code == 0, (command, err)
        assert "Traceback" not in out + err
    assert done_trials(json.loads(cli("status", "dmg", "--json")[1])) == TRIALS  # none re-run


def test_a_journal_that_is_a_directory_is_refused_in_one_line(tmp_path, runs_dir, cli):
    journal = finished_campaign(tmp_path, cli)
    finished_campaign(tmp_path, cli, name="other", trials=1)
    journal.unlink()
    journal.mkdir()
    for command in (("status", "dmg"), ("best", "dmg"), ("resume", "dmg")):
        code, out, err = cli(*command)
        assert code == 2 and len(err.strip().splitlines()) == 1, (command, err)
        assert "is a directory, not a journal" in err
    code, out, _ = cli("status", "--json")  # one broken folder does not hide the others
    listing = json.loads(out)
    assert code == 0 and [c["campaign"] for c in listing["campaigns"]] == ["other"]
    assert [u["campaign"] for u in listing["unreadable"]] == ["dmg"]


def test_a_journal_that_is_a_fifo_or_too_large_is_refused_not_waited_on(tmp_path, runs_dir, cli):
    """A trial can leave anything where its campaign's journal goes; the service reads every
    journal to list its campaigns: a FIFO is refused without waiting for a writer, and a file
    far past any journal's size without reading it whole."""
    import threading

    from orchestrator.record import journal_lines

    journal = finished_campaign(tmp_path, cli)
    journal.unlink()
    os.mkfifo(journal)
    answer: dict = {}
    reader = threading.Thread(target=lambda: answer.update(r=cli("status", "dmg")), daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():
        os.close(os.open(journal, os.O_WRONLY | os.O_NONBLOCK))  # let the reader go
        reader.join(timeout=60)
        pytest.fail("status waited on a FIFO as the journal")
    code, _, err = answer["r"]
    assert code == 2 and "is a FIFO, not a journal" in err and len(err.strip().splitlines()) == 1
    journal.unlink()
    with open(journal, "wb") as f:  # sparse: no disk spent
        f.truncate(journal_lines.JOURNAL_MAX_BYTES + 1)
    code, _, err = cli("status", "dmg")
    assert code == 2 and "is larger than" in err and len(err.strip().splitlines()) == 1


def test_a_journal_that_is_a_symbolic_link_is_never_followed(tmp_path, runs_dir, cli):
    journal = finished_campaign(tmp_path, cli)
    elsewhere = tmp_path / "system-file"
    elsewhere.write_text("precious\n")
    journal.unlink()
    journal.symlink_to(elsewhere)
    code, _, err = cli("resume", "dmg")
    assert code == 2 and "is a symbolic link" in err and len(err.strip().splitlines()) == 1
    assert elsewhere.read_text() == "precious\n"


def test_another_campaigns_journal_copied_in_is_refused(tmp_path, runs_dir, cli):
    journal = finished_campaign(tmp_path, cli)
    big = write_spec(tmp_path / "big.yaml", name="big", budget={"max_trials": 1},
                     backend={"kind": "simulated"}, tracking={"enabled": False},
                     scale={"nodes": 4})
    assert cli("run", str(big))[0] == 0
    foreign = (runs_dir / "big" / "journal.jsonl").read_text().replace('"big"', '"dmg"')
    journal.write_text(foreign)  # the name matches; the scale it ran at does not
    for command in (("best", "dmg"), ("resume", "dmg")):
        code, _, err = cli(*command)
        assert code == 2 and "another model, cluster or scale" in err, (command, err)


@contextmanager
def read_only(path: Path):
    """The file made read-only even for root (which ignores file modes): a read-only bind
    mount of it onto itself, undone by unmounting that mount point."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


@contextmanager
def full_disk(folder: Path):
    """A 4 MiB file system at `folder`, then filled up; unmounted after."""
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    try:
        yield lambda: _fill(folder / "filler")
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _fill(path: Path) -> None:
    with open(path, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def _extend(runs: Path, name: str, trials: int) -> None:
    saved = runs / name / "spec.yaml"
    saved.write_text(saved.read_text().replace("max_trials: 2", f"max_trials: {trials}"))


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a file system (root only)")


@needs_root
def test_a_read_only_journal_stops_resume_in_one_line_losing_nothing(tmp_path, runs_dir, cli):
    journal = finished_campaign(tmp_path, cli, name="ro", trials=2)
    before = journal.read_bytes()
    _extend(runs_dir, "ro", 4)
    with read_only(journal):
        code, out, err = cli("resume", "ro")
    assert code == 2 and "journal" in err and "Read-only file system" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in out + err
    assert journal.read_bytes().startswith(before)
    assert cli("resume", "ro")[0] == 0  # once writable, the campaign goes on
    assert done_trials(json.loads(cli("status", "ro", "--json")[1])) == 4


@needs_root
def test_a_full_disk_stops_resume_in_one_line_losing_nothing(tmp_path, monkeypatch, cli):
    runs = tmp_path / "small"
    monkeypatch.setenv("PARATUNE_RUNS_DIR", str(runs))
    with full_disk(runs) as fill:
        journal = finished_campaign(tmp_path, cli, name="full", trials=2)
        before = journal.read_bytes()
        _extend(runs, "full", 4)
        fill()
        code, out, err = cli("resume", "full")
        assert code == 2 and "No space left on device" in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in out + err
        assert journal.read_bytes().startswith(before)
        (runs / "filler").unlink()
        assert cli("resume", "full")[0] == 0
        assert done_trials(json.loads(cli("status", "full", "--json")[1])) == 4
