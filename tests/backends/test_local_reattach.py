"""The local backend's re-attach to a trial launcher that outlived its controller: known by its
PID and start time, never a recycled PID; its timeout counts from the journaled start; a
trial that ended with a result while no controller watched is adopted, not run again."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from conftest import builtin_request

from orchestrator.backends.local import LocalBackend
from orchestrator.common.processes import is_running, start_time


@pytest.fixture
def sleeper():
    """A stand-in launcher; stopped by its PID at the end."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def info_of(process, started_at: float | None = None) -> dict:
    return {"pid": process.pid, "pgid": process.pid, "start_time": start_time(process.pid),
            "started_at": started_at or time.time()}


def test_a_running_launcher_is_reattached_and_polled(tmp_path, sleeper):
    request = builtin_request(tmp_path / "t0001", "t0001", {"steps": 2})
    info = info_of(sleeper)
    handle = LocalBackend().reattach(info, request)
    assert handle is not None and handle.poll() is None
    assert handle.info() == info
    handle.cancel()
    sleeper.wait(timeout=10)
    assert not is_running(info["pid"], info["start_time"])


def test_a_recycled_pid_or_an_old_journal_is_not_reattached(tmp_path, sleeper):
    request = builtin_request(tmp_path / "t0001", "t0001", {"steps": 2})
    recycled = {**info_of(sleeper), "start_time": info_of(sleeper)["start_time"] - 1}
    assert LocalBackend().reattach(recycled, request) is None
    assert LocalBackend().reattach({"pid": sleeper.pid, "pgid": sleeper.pid}, request) is None
    assert sleeper.poll() is None  # never touched


def test_the_timeout_counts_from_the_journaled_start(tmp_path, sleeper):
    request = builtin_request(tmp_path / "t0001", "t0001", {"steps": 2}, timeout_s=30)
    handle = LocalBackend().reattach(info_of(sleeper, time.time() - 31), request)
    result = handle.poll()
    assert result.status == "timeout" and "timeout_s=30" in result.error
    assert sleeper.wait(timeout=10) != 0


def test_a_trial_that_ended_with_a_result_is_adopted(tmp_path, sleeper):
    request = builtin_request(tmp_path / "t0001", "t0001", {"steps": 2})
    info = info_of(sleeper)
    sleeper.kill()
    sleeper.wait()
    assert LocalBackend().reattach(info, request) is None  # no result: it runs again
    request.folder.path.mkdir(parents=True)
    request.folder.result_file.write_text(json.dumps({"status": "ok", "tokens_per_s": 12.0}))
    handle = LocalBackend().reattach(info, request)
    result = handle.poll()
    assert result.status == "ok" and result.tokens_per_s == 12.0
