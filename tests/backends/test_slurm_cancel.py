"""A cancelled Slurm trial is never submitted again.

Once, in a CI run, a cancel right at a job's start was followed half a second later by a second
job that ran the trial to its timeout, while sacct kept the first as CANCELLED: the handle
resubmits only on NODE_FAIL, PREEMPTED or BOOT_FAIL, so Slurm reported one of those for the job
it was killing during its launch. That timing cannot be produced on demand against the real
Slurm (tests/backends/test_slurm_backend.py cancels through it and checks the end state), so here the
submitit job is a stand-in that reports those states.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import builtin_request

from orchestrator.backends.slurm import SlurmHandle


class StandInJob:
    """What SlurmHandle reads of a submitit job: its id, its state, get_info and cancel."""

    job_id = "41"

    def __init__(self, state: str) -> None:
        self.state = state
        self.cancel_calls = 0

    def get_info(self, mode: str = "standard") -> dict:
        return {"State": self.state}

    def cancel(self, check: bool = True) -> None:
        self.cancel_calls += 1


class NoResubmission:
    spec = SimpleNamespace(max_requeues=2)

    def executor_for(self, request):
        raise AssertionError("a cancelled trial was submitted again")


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED", "CANCELLED by 0"])
def test_a_cancelled_trial_ends_as_failed_whatever_state_slurm_reports(tmp_path, state):
    job = StandInJob(state)
    handle = SlurmHandle(NoResubmission(), builtin_request(tmp_path / "t", "t", {}), job)
    handle.cancel()
    result = handle.poll()
    assert job.cancel_calls == 1 and handle.requeues == 0
    assert result.status == "failed"
    assert result.error == f"Slurm job 41 cancelled (ended {state.split()[0]})"


def test_a_node_failure_without_cancel_is_still_resubmitted(tmp_path):
    submitted = []

    class Resubmits(NoResubmission):
        def executor_for(self, request):
            return SimpleNamespace(submit=lambda fn, req: submitted.append(req) or
                                   StandInJob("PENDING"))

    handle = SlurmHandle(Resubmits(), builtin_request(tmp_path / "t", "t", {}),
                         StandInJob("NODE_FAIL"))
    assert handle.poll() is None
    assert handle.requeues == 1 and len(submitted) == 1
