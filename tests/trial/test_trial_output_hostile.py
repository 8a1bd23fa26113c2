"""Whatever a trial leaves in its folder, its controller neither crashes, hangs nor fills memory:
a result that is a list, a folder, JSON nested 100k deep, a link to /dev/zero, a FIFO, a log of
hundreds of megabytes or one replaced by a FIFO or a link; a file where a trial's folder goes, a
`trials` folder turned into a link. Each is that trial's failure, with one line saying why, and
the campaign goes on with nothing recorded lost."""

from __future__ import annotations

import os
import time

import pytest
from controller_harness import (
    GOOD,
    PEAK_MEMORY_MB,
    TRACEBACK,
    command_spec,
    controller,
    finished,
    trial_program,
)
from conftest import journal_events

from orchestrator.common.bounded_files import UnreadableFile, read_bounded, read_tail

# What each trial leaves, by its ID; the first one reports a sound result. The trial finds its
# result's path in $PARATUNE_RESULT_FILE (`result`), its folder (`here`) above it, its log
# (`log`) there and as its stdout.
HOSTILE = {
    "t0001": f"open(result, 'w').write({GOOD!r})",
    "t0002": "open(result, 'w').write('[1, 2, 3]')",
    "t0003": "os.mkdir(result)",
    "t0004": "open(result, 'w').write('[' * 100000 + ']' * 100000)",
    "t0005": "os.symlink('/dev/zero', result)",
    "t0006": "os.mkfifo(result)",
    "t0007": "os.symlink('/nowhere/result.json', result)",
    "t0008": "os.ftruncate(1, 400 << 20); print('the last line of a 400 MB log')",
    "t0009": "os.unlink(log); os.mkfifo(log)",
    "t0010": "os.unlink(log); os.symlink(f'{here}/../../journal.jsonl', log)",
    "t0011": f"open(result, 'w').write({GOOD!r})",
}
WHY = {
    "t0002": "a JSON list, not an object", "t0003": "is a directory",
    "t0004": "nested more than", "t0005": "result.json is a symbolic link",
    "t0006": "result.json is a FIFO", "t0007": "result.json is a symbolic link",
    "t0008": "the last line of a 400 MB log", "t0009": "trial.log is a FIFO",
    "t0010": "trial.log is a symbolic link",
}


def test_each_hostile_trial_output_fails_its_trial_alone(tmp_path, runs_dir):
    program = trial_program(HOSTILE)
    spec = command_spec(tmp_path / "hostile.yaml", "hostile", program, len(HOSTILE))
    code, err, peak = controller(runs_dir, "run", str(spec))
    assert code == 0 and not TRACEBACK.search(err), err[-3000:]
    assert peak < PEAK_MEMORY_MB
    results = finished(runs_dir / "hostile")
    assert set(results) == set(HOSTILE)
    assert results["t0001"]["status"] == results["t0011"]["status"] == "ok"
    for trial_id, why in WHY.items():
        error = results[trial_id]["error"] or ""
        assert results[trial_id]["status"] == "failed", (trial_id, results[trial_id])
        assert why in error and "\n" not in error, (trial_id, error)
    code, err, _ = controller(runs_dir, "resume", "hostile")
    assert code == 0 and not TRACEBACK.search(err), err[-3000:]
    code, err, _ = controller(runs_dir, "status", "hostile")
    assert code == 0, err
    assert finished(runs_dir / "hostile") == results


def test_resume_reads_a_result_linked_to_dev_zero_as_a_failure(tmp_path, runs_dir):
    """The controller is stopped (SIGTERM: it detaches) while its trial runs; the trial then
    links its result to /dev/zero and ends. `resume` re-attaches it, reads the result bounded
    and records the failure."""
    go = tmp_path / "go"
    program = trial_program({
        "t0001": f"open(result, 'w').write({GOOD!r})",
        "t0002": (f"import time\n    while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
                  "    os.symlink('/dev/zero', result)"),
    })
    spec = command_spec(tmp_path / "zero.yaml", "zero", program, 2)
    campaign = runs_dir / "zero"

    def second_submitted() -> bool:
        try:  # the journal may be missing yet, or end in a line being written
            events = journal_events(campaign)
        except (OSError, ValueError):
            return False
        return any(e["event"] == "submitted" and e["trial_id"] == "t0002" for e in events)

    code, err, _ = controller(runs_dir, "run", str(spec), stop_when=second_submitted)
    assert code == 143, err[-3000:]
    go.touch()
    deadline = time.monotonic() + 60
    while not os.path.lexists(campaign / "trials" / "t0002" / "result.json"):
        assert time.monotonic() < deadline, "the trial did not write its result"
        time.sleep(0.05)
    code, err, peak = controller(runs_dir, "resume", "zero")
    assert code == 0 and not TRACEBACK.search(err), err[-3000:]
    results = finished(campaign)
    assert results["t0001"]["status"] == "ok"
    assert results["t0002"]["status"] == "failed"
    assert "result.json is a symbolic link" in results["t0002"]["error"]


def test_what_sits_where_a_trial_folder_goes_is_moved_aside(tmp_path, runs_dir):
    """t0001 leaves a file where t0002's folder goes; t0002 turns `trials` into a link to a
    folder of its own. Neither is followed nor lost: each is moved aside, the next trial runs."""
    elsewhere = tmp_path / "elsewhere"
    program = trial_program({
        "t0001": f"open(f'{{here}}/../t0002', 'w').write('keep me')\n"
                 f"    open(result, 'w').write({GOOD!r})",
        "t0002": (f"os.rename(os.path.dirname(here), {str(elsewhere)!r})\n"
                  f"    os.symlink({str(elsewhere)!r}, os.path.dirname(here))\n"
                  f"    open(result, 'w').write({GOOD!r})"),
        "t0003": f"open(result, 'w').write({GOOD!r})",
    })
    spec = command_spec(tmp_path / "aside.yaml", "aside", program, 3)
    code, err, _ = controller(runs_dir, "run", str(spec))
    assert code == 0 and not TRACEBACK.search(err), err[-3000:]
    campaign = runs_dir / "aside"
    results = finished(campaign)
    assert [results[t]["status"] for t in ("t0001", "t0002", "t0003")] == ["ok", "failed", "ok"]
    assert "trials is a symbolic link" in results["t0002"]["error"]
    trials = campaign / "trials"
    assert trials.is_dir() and not trials.is_symlink()
    assert not (elsewhere / "t0003").exists()  # the link was not followed
    moved_link = [p for p in campaign.iterdir() if p.name.startswith("trials.moved-")]
    assert len(moved_link) == 1 and moved_link[0].is_symlink()
    assert (elsewhere / "t0001" / "result.json").exists()  # earlier trials' files kept
    kept = [p for p in elsewhere.iterdir() if p.name.startswith("t0002.moved-")]
    assert [p.read_text() for p in kept] == ["keep me"]
    assert "moved" in (trials / "t0003" / "trial.log").read_text()


def test_the_bounded_reader_refuses_special_files_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    for path, why in ((fifo, "is a FIFO"), (zero, "is a symbolic link"), (tmp_path, "directory")):
        with pytest.raises(UnreadableFile, match=why):
            read_bounded(path, 100)
    with pytest.raises(UnreadableFile, match="is a device"):
        read_bounded(zero, 100, follow_links=True)
    with pytest.raises(UnreadableFile) as missing:
        read_bounded(tmp_path / "none", 100)
    assert missing.value.missing
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UnreadableFile, match="larger than 100 bytes"):
        read_bounded(big, 100)
    assert read_bounded(big, 101) == b"x" * 101


def test_the_tail_reader_reads_only_whole_last_lines(tmp_path):
    log = tmp_path / "log"
    with open(log, "wb") as f:
        f.truncate(1 << 30)  # a sparse gigabyte: reading it whole would take that much memory
        f.seek(0, 2)
        f.write(b"one\ntwo\nthree\n")
    assert read_tail(log, 9) == b"three\n"  # "wo\nthree\n" begins mid-line: from its next one
    assert read_tail(log, 10) == b"two\nthree\n"
    log.write_bytes(b"0123456789")
    assert read_tail(log, 4) == b"6789"  # one line longer than the limit: its end
    assert read_tail(log, 100) == b"0123456789"
