"""A trial of several tasks ends soon after one of its ranks fails, as torchrun's agent ends a
node's ranks: the first rank to fail leaves a note in the trial folder, and every other task of
the same attempt stops its ranks once it has seen the note for GRACE_S, reporting that rank's
status and cause.

Without it, the others wait in the rendezvous or a collective until the trial's timeout (a
rank 0 that could not open its rendezvous port held a two-rank trial for its whole 300 s), and
the recorded result, rank 0's, says `timeout` and names no cause.

A rank other than 0 has failed when its program exits non-zero before the deadline (its
folder's result is rank 0's, so only its exit code and its own log speak for it); rank 0 when
its result says `failed` or `oom`. The grace lets a trial whose rank exits non-zero at teardown
(as torch can, after the last step) still leave rank 0's result, which is then what counts.
"""

from __future__ import annotations

import time

from orchestrator.backends.base import TrialRequest
from orchestrator.common.bounded_files import UnreadableFile, read_bounded, read_tail
from orchestrator.common.first_writer import write_once
from orchestrator.result import TrialResult
from orchestrator.trainers.result_reading import LOG_TAIL_BYTES, log_tail

FAILING = ("failed", "oom")
GRACE_S = 30.0  # past the longest a rank 0 takes to write its result after its last step


class PeerFailure:
    """One rank's side of its attempt's failure note."""

    def __init__(self, request: TrialRequest, attempt: str, rank: int) -> None:
        self.request, self.rank = request, rank
        self.path = request.folder.rank_failure_file(attempt)
        self.seen_at: float | None = None  # when this rank first read another rank's note

    def note(self) -> tuple[int, str, str] | None:
        """(rank, status, cause) of the attempt's first failed rank, or None."""
        try:
            text = read_bounded(self.path, 4096).decode(errors="replace")
        except UnreadableFile:
            return None
        rank, status, cause = (text.split("\n", 2) + ["", ""])[:3]
        if not rank.isdigit() or status not in FAILING:
            return None  # not a note this code wrote
        return int(rank), status, cause

    def stop_now(self) -> bool:
        """Whether another rank's failure was seen GRACE_S ago or more."""
        note = self.note()
        if note is None or note[0] == self.rank:
            return False
        if self.seen_at is None:
            self.seen_at = time.monotonic()
        return time.monotonic() - self.seen_at >= GRACE_S

    def stopped(self) -> TrialResult:
        """This rank's result once stopped for another's failure; rank 0's own where it left
        one (the trial reported, and a rank's failure at teardown changes nothing)."""
        if self.rank == 0 and self.request.folder.left_result():
            return self.request.read_result(None)
        rank, status, cause = self.note() or (-1, "failed", "its note could not be read again")
        return TrialResult(status=status, world_size=self.request.world_size,
                           error=f"rank {rank} ended {status} first: {cause}; rank {self.rank} "
                                 f"was stopped {GRACE_S:g} s later")

    def settle(self, result: TrialResult, returncode: int | None,
               timed_out: bool) -> TrialResult:
        """Leave the note if this rank failed first; a rank that failed after another reports
        that one's cause first. A rank other than 0 reports its own failure, not the result in
        the folder, which is rank 0's."""
        own = self._own_failure(result, returncode, timed_out)
        if own is None:
            return result
        status, cause = own
        self._leave(status, cause)
        first = self.note()
        if first is None or first[0] == self.rank:
            return result if self.rank == 0 else TrialResult(
                status=status, world_size=self.request.world_size,
                error=f"rank {self.rank}: {cause}")
        return TrialResult(status=first[1], world_size=self.request.world_size,
                           error=f"rank {first[0]} ended {first[1]} first: {first[2]}; then "
                                 f"rank {self.rank}: {cause}")

    def _own_failure(self, result: TrialResult, returncode: int | None,
                     timed_out: bool) -> tuple[str, str] | None:
        if timed_out:
            return None
        if self.rank == 0:
            return (result.status, result.error or "no error text") if result.status in FAILING \
                else None
        if returncode in (0, None):
            return None
        try:
            log = read_tail(self.request.folder.rank_log(self.rank), LOG_TAIL_BYTES).decode(
                errors="replace")
        except UnreadableFile:
            log = ""
        oom = self.request.trainer.out_of_memory(log)
        return ("oom", oom) if oom else ("failed", f"exit code {returncode}: {log_tail(log)}")

    def _leave(self, status: str, cause: str) -> None:
        write_once(self.path, f"{self.rank}\n{status}\n{' '.join(cause.split())[:1000]}")
