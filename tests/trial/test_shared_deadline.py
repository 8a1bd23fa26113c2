"""One trial's tasks on several nodes stop at one deadline, and a rank that fails after it lost a
peer to the timeout: the trial ends `timeout`, not `failed`, whichever task started first."""

from __future__ import annotations

import os
import sys
import time

from orchestrator.backends.on_node import shared_deadline
from orchestrator.result import TrialResult
from orchestrator.trial.folder import DEADLINE_PREFIX, TrialFolder
from orchestrator.trial.process import TrialProcess


def exits_failing(folder: TrialFolder, deadline: float | None) -> TrialProcess:
    """A rank whose program fails on its own (as one does when a peer's ranks are killed)."""
    return TrialProcess([sys.executable, "-c", "raise SystemExit(1)"], folder=folder,
                        env=dict(os.environ), timeout_s=600, world_size=2, deadline=deadline,
                        read_result=lambda code: TrialResult(status="ok" if code == 0 else "failed",
                                                             world_size=2))


def test_the_first_task_sets_the_deadline_and_the_others_read_it(tmp_path):
    folder = TrialFolder(tmp_path / "t0001")
    folder.prepare({})
    before = time.time()
    first = shared_deadline(folder, "41-0", timeout_s=8)
    assert before + 8 <= first <= time.time() + 8
    assert shared_deadline(folder, "41-0", timeout_s=500) == first  # a later task, same attempt
    assert shared_deadline(folder, "41-1", timeout_s=500) >= before + 500  # a requeued attempt
    assert sorted(folder.path.glob(f"{DEADLINE_PREFIX}*")) == [folder.deadline_file("41-0"),
                                                                folder.deadline_file("41-1")]
    folder.prepare({})  # a new attempt in the same folder: a rendezvous may be met again
    assert shared_deadline(folder, "41-0", timeout_s=500) >= before + 500


def test_a_rank_failing_after_the_shared_deadline_lost_a_peer_to_the_timeout(tmp_path):
    folder = TrialFolder(tmp_path / "t0001")
    folder.prepare({})
    rank = exits_failing(folder, deadline=time.time())  # passed by the time the program ends
    rank.process.wait(timeout=120)
    result = rank.poll()
    assert result.status == "timeout" and "trial.timeout_s=600" in result.error


def test_a_rank_failing_before_the_deadline_or_without_one_failed(tmp_path):
    folder = TrialFolder(tmp_path / "t0001")
    folder.prepare({})
    for deadline in (time.time() + 600, None):
        rank = exits_failing(folder, deadline)
        rank.process.wait(timeout=120)
        assert rank.poll().status == "failed"
