"""Whatever a trial leaves in its folder, its controller neither crashes, hangs nor fills memory:
a result that is a list, a folder, JSON nested 100k deep, a link to /dev/zero, a FIFO, a log of
hundreds of megabytes or one replaced by a FIFO or a link; a file where a trial's folder goes, a
`trials` folder turned into a link. Each is that trial's failure, with one line saying why, and
the campaign goes on with nothing recorded lost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, journal_events

from orchestrator.common.bounded_files import UnreadableFile, read_bounded, read_tail

PEAK_MEMORY_MB = 300  # a controller holds about 100 MB; reading a 400 MB log whole is far more
CONTROLLER_LIMIT_S = 120  # far above what these few-second campaigns need on a busy machine
TRACEBACK = re.compile(r"^Traceback", re.M)  # the controller's own (a trial's is in its row)
GOOD = '{"status": "ok", "tokens_per_s": 100.0, "step_time_s": 1.0}'

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


def trial_program(cases: dict[str, str]) -> str:
    """A trial program that does what `cases` says for its trial ID, then exits 0."""
    branches = "".join(f"if trial == {tid!r}:\n    {code}\n" for tid, code in cases.items())
    return ("import os, sys\nresult = os.environ['PARATUNE_RESULT_FILE']\n"
            "here = os.path.dirname(result)\nlog = os.path.join(here, 'trial.log')\n"
            "trial = os.environ['PARATUNE_TRIAL_ID']\n" + branches)


def command_spec(path: Path, name: str, program: str, trials: int, **trial) -> Path:
    """A campaign of `trials` local runs of `program` (a grid wide enough for them)."""
    script = path.with_suffix(".py")
    script.write_text(program)
    spec = {
        "name": name, "model": "tiny", "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "space": {"tp": [1, 2], "pp": [1], "zero_stage": [0], "micro_batch_size": [1, 2, 4],
                  "activation_checkpointing": ["none", "selective", "full"]},
        "search": {"algorithm": "grid"}, "budget": {"max_trials": trials, "max_concurrent": 1},
        "backend": {"kind": "local"}, "tracking": {"enabled": False},
        "trial": {"command": [sys.executable, str(script), "{tp}", "{micro_batch_size}",
                              "{activation_checkpointing}"], "timeout_s": 60, **trial},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _vm_hwm_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), "VmHWM: 0 kB")
    return int(line.split()[1]) / 1024


def controller(runs_dir: Path, *args: str, stop_when=None) -> tuple[int, str, float]:
    """Run `paratune ARGS` as a process: (exit code, stderr, its peak memory in MB). It is
    killed, and the test fails, where it outgrows PEAK_MEMORY_MB or CONTROLLER_LIMIT_S;
    `stop_when()` true sends it SIGTERM."""
    with open(runs_dir.parent / "controller.err", "w+") as err:
        process = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                                   env={**os.environ, "PARATUNE_RUNS_DIR": str(runs_dir)},
                                   stdout=subprocess.DEVNULL, stderr=err)
        deadline, peak, stopped = time.monotonic() + CONTROLLER_LIMIT_S, 0.0, False
        while process.poll() is None:
            peak = max(peak, _vm_hwm_mb(process.pid))
            if peak > PEAK_MEMORY_MB or time.monotonic() > deadline:
                process.kill()
                process.wait()
                pytest.fail(f"paratune {' '.join(args)}: killed at {peak:.0f} MB after "
                            f"{CONTROLLER_LIMIT_S - deadline + time.monotonic():.0f} s")
            if stop_when is not None and not stopped and stop_when():
                process.send_signal(signal.SIGTERM)
                stopped = True
            time.sleep(0.02)
        err.seek(0)
        return process.returncode, err.read(), peak


def finished(campaign: Path) -> dict[str, dict]:
    return {e["trial_id"]: e["result"] for e in journal_events(campaign) if e["event"] == "finished"}


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
        return (campaign / "journal.jsonl").exists() and any(
            e["event"] == "submitted" and e["trial_id"] == "t0002" for e in journal_events(campaign))

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
