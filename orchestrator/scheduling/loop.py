"""The scheduling loop: fill free slots from one queue and the proposal sources, submit, poll,
and record each ended trial.

Each result is journaled before anything else is done with it (the searcher told, MLflow
written), so a controller killed at any point resumes without losing or repeating a trial.
What a proposal costs, whether it fits and what was predicted is the live cost model's
(live_cost_model.py); what MLflow gets is the tracking session's. The loop never sleeps while
results are arriving.

When campaigns share machines each trial also needs a slot (slots.py): a campaign refused one
waits with its next trial in hand and asks again, and reports slots free only once their
trials are journaled as ended, so the journals never show more trials at once than granted.
Under `budget.gpu_hours` each trial first reserves what it may use (record/budget.py): one
whose reservation does not fit in what is left waits in hand the same way until a running
trial ends, and is not started when none runs.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.backends import Backend, TrialHandle
from orchestrator.costmodel import CostModel
from orchestrator.record.budget import Tally
from orchestrator.record.journal import REPEAT, SCREEN, SEARCH, Journal, TrialRecord
from orchestrator.result import TrialResult
from orchestrator.scheduling.live_cost_model import LiveCostModel
from orchestrator.scheduling.proposals import Proposal, ProposalSource
from orchestrator.scheduling.requests import trial_request
from orchestrator.scheduling.reservations import Reservations
from orchestrator.scheduling.signals import Detached, DetachRequest
from orchestrator.scheduling.slots import NoSlotLimit, TrialSlots
from orchestrator.search import Searcher
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.slice_scale import trials_at_once
from orchestrator.tracking.session import TrackingSession
from orchestrator.trial.activity import last_activity
from orchestrator.trial.folder import TrialFolder

POLL_INTERVAL_S = 0.2
ACTIVITY_INTERVAL_S = 2.0  # how often running trials' logs are read for their activity
SLOT_RETRY_S = 1.0  # a refused campaign asks again this often, or as soon as a trial of its ends

# Called with ("submitted" | "reattached" | "activity" | "finished", record) so a front end can
# show progress.
EventHook = Callable[[str, TrialRecord], None]


class SchedulingLoop:
    def __init__(self, spec: CampaignSpec, *, campaign_dir: Path, journal: Journal,
                 backend: Backend, searcher: Searcher, cost_model: CostModel, tally: Tally,
                 records: dict[str, TrialRecord], started_at: float,
                 tracking: TrackingSession | None = None, on_event: EventHook | None = None,
                 workdir: str | None = None, slots: TrialSlots | None = None,
                 detach: DetachRequest | None = None):
        self.spec = spec
        self.campaign_dir = campaign_dir
        self.journal = journal
        self.backend = backend
        self.searcher = searcher
        self.model = LiveCostModel(cost_model, list(records.values()))
        self.tally = tally
        self.records = records
        self._highest_id = max((int(t[1:]) for t in records if t[:1] == "t" and t[1:].isdigit()),
                               default=0)
        self.started_at = started_at
        self.tracking = tracking
        self.on_event = on_event or (lambda kind, record: None)
        self.workdir = workdir
        self.slots = slots or NoSlotLimit()
        self.detach = detach or DetachRequest()
        self.queue: deque[TrialRecord] = deque()  # trials to run before asking any source
        self.running: dict[str, tuple[TrialRecord, TrialHandle]] = {}
        self.stop_reason: str | None = None
        self._pending: list[TrialRecord] = []
        self._waiting: tuple[TrialRecord, bool] | None = None  # (trial, budgeted) held back
        self.reservations = Reservations(spec, self.model)  # of budget.gpu_hours
        self._no_room: str | None = None  # why budgeted trials stopped: the next did not fit
        self._retry_at = 0.0
        self._activity_at = 0.0  # when running trials' logs are next read
        self._seen = {(r.config, r.phase) for r in records.values()}

    # ------------------------------------------------------------- what sources read

    @property
    def busy(self) -> int:
        return len(self.running) + len(self._pending)

    def is_new(self, layout: Layout, phase: str) -> bool:
        return (layout, phase) not in self._seen

    @property
    def trials_left(self) -> int:
        return self.tally.state(self.spec.budget, self.started_at,
                                pending=self._pending_new()).trials_left

    # ------------------------------------------------------------- the loop

    def run(self, sources: list[ProposalSource]) -> None:
        """Until nothing runs, nothing waits for a slot and no source has anything more."""
        self.slots.report(self.busy)  # trials re-attached on resume hold slots already
        while True:
            if self.detach.requested:  # a SIGTERM whose Detached was dropped (signals.py)
                raise Detached(self.spec.name)
            self._fill(sources)
            if not self.running and self._waiting is None:
                break
            if not self._collect():
                time.sleep(POLL_INTERVAL_S)
        self.slots.report(self.busy)

    def _fill(self, sources: list[ProposalSource]) -> None:
        self._pending = []
        while self.busy < trials_at_once(self.spec) and time.monotonic() >= self._retry_at:
            entry = self._next(sources)
            if entry is None:
                break
            record, budgeted = entry
            if record.done:  # infeasible ones are recorded without running
                continue
            refused = self._no_room_for(record)
            if refused and self.busy:
                self._waiting = entry  # a running trial's end gives back what it did not use
                break
            if refused:  # nothing runs that could give any back: it never runs
                self._drop(record)
                self._no_room = self.stop_reason = refused
                continue
            if not self.slots.acquire(self.busy):
                self._waiting = entry  # first in line when a slot is granted
                self._retry_at = time.monotonic() + SLOT_RETRY_S
                break
            self._pending.append(record)
        if self._pending:
            self._submit(self._pending)
        self._pending = []

    def _next(self, sources: list[ProposalSource]) -> tuple[TrialRecord, bool] | None:
        """The trial refused a slot last time, else the queue's next (already counted in the
        budget), else a new proposal; with whether the budget applies to it."""
        if self._waiting is not None:
            entry, self._waiting = self._waiting, None
            if not (entry[1] and self._budget_spent()):
                return entry
            self._drop(entry[0])  # the budget ran out while it waited: it never runs
        if self.queue:
            return self.queue.popleft(), False
        return self._propose(sources)

    def _pending_new(self) -> int:
        """Trials about to be submitted that the budget has not counted yet: not those a
        resumed campaign runs again (their first submission counted them)."""
        return sum(1 for r in self._pending if r.submitted_at is None)

    def _budget_spent(self) -> str | None:
        budget = self.tally.state(self.spec.budget, self.started_at, pending=self._pending_new())
        # Patience can recover as running trials improve; a trial refused room cannot.
        self.stop_reason = budget.exhausted() or self._no_room
        return self.stop_reason

    def _no_room_for(self, record: TrialRecord) -> str | None:
        running = [r for r, _ in self.running.values()]
        return self.reservations.refusal(record, running, self._pending, self.tally,
                                         self.started_at)

    def _drop(self, record: TrialRecord) -> None:
        """Forget a trial that will not run. One a resumed campaign was to run again stays:
        its journal has it submitted."""
        self.reservations.settled(record.trial_id)
        if record.submitted_at is None:
            del self.records[record.trial_id]
            self._seen.discard((record.config, record.phase))

    def _propose(self, sources: list[ProposalSource]) -> tuple[TrialRecord, bool] | None:
        spent = self._budget_spent()
        for source in sources:
            if source.budgeted and spent:
                continue
            proposal = source.propose(self)
            if proposal is not None:
                return self._record(proposal), source.budgeted
        return None

    def _new_trial_id(self) -> str:
        """One past the highest ID handed out. A journal can have gaps: a trial about to be
        submitted when the controller stopped is not in it, while those pruned after it (as
        infeasible, journaled at once) are; counting records would then hand an ID out again."""
        self._highest_id += 1
        return f"t{self._highest_id:04d}"

    def _record(self, proposal: Proposal) -> TrialRecord:
        record = TrialRecord(self._new_trial_id(), proposal.config, phase=proposal.phase)
        self.records[record.trial_id] = record
        self._seen.add((record.config, record.phase))
        if proposal.prune and (infeasible := self.model.infeasible(record.config)):
            self._finish(record, infeasible)  # recorded, never run
        return record

    def request(self, record: TrialRecord):
        return trial_request(self.spec, record, self.campaign_dir, self.workdir, self.model.base)

    def _submit(self, records: list[TrialRecord]) -> None:
        with signals_deferred():
            handles = self.backend.submit_many([self.request(r) for r in records])
            for record, handle in zip(records, handles):
                self.started(record, handle)

    def started(self, record: TrialRecord, handle: TrialHandle) -> None:
        """Journal a trial as running on `handle` (submitted now, or re-attached on resume)."""
        first_submission = record.submitted_at is None  # resumed trials were counted already
        record.handle = handle.info()
        record.submitted_at = time.time()
        self.journal.record_submitted(record)
        if first_submission:
            self.tally.submitted()
        self.running[record.trial_id] = (record, handle)
        self.on_event("submitted", record)

    def _collect(self) -> int:
        """Record every trial that has ended; return how many did."""
        ended = 0
        look = time.monotonic() >= self._activity_at  # logs are read every few seconds
        if look:
            self._activity_at = time.monotonic() + ACTIVITY_INTERVAL_S
        for trial_id, (record, handle) in list(self.running.items()):
            result = handle.poll()
            if result is None:
                if look:
                    self._follow_activity(record)
                continue
            del self.running[trial_id]
            self.reservations.settled(trial_id)
            if result.world_size is None:
                result.world_size = record.config.world_size
            self._finish(record, result)
            ended += 1
        if ended:
            self.slots.report(self.busy)  # after the journal has them as ended
            self._retry_at = 0.0  # a slot of ours is free: ask for it at once
            self.model.recalibrate(list(self.records.values()))
        return ended

    def _follow_activity(self, record: TrialRecord) -> None:
        """Say when a running trial's log names a new activity (its phase lines)."""
        activity = last_activity(TrialFolder.of(self.campaign_dir, record.trial_id).log_file)
        if activity and activity != record.activity:
            record.activity = activity
            self.on_event("activity", record)

    def _finish(self, record: TrialRecord, result: TrialResult) -> None:
        if result.status != "infeasible":
            self.model.annotate(record.config, result)
        self.journal.record_finished(record, result)
        record.result = result
        record.finished_at = time.time()
        self.tally.finished(record)
        if teaches_searcher(record):
            self.searcher.tell(record.config, result)
        if self.tracking is not None:
            self.tracking.mirror(record, list(self.records.values()))
        self.on_event("finished", record)

    def cancel_running(self) -> None:
        for _, handle in self.running.values():
            handle.cancel()
        self.running.clear()
        self.reservations.clear()
        self.slots.report(0)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait while trials are started and journaled: a trial started but
    not yet journaled would be lost to both the cancel and the resume that follow them. The
    handlers are swapped, not the signal mask, which the trials would inherit."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are handled in the main thread only
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for sig in caught:
            signal.raise_signal(sig)  # now, to the handler it was meant for


def teaches_searcher(record: TrialRecord) -> bool:
    """Searchers learn from the trials they proposed: search trials, or screens under halving,
    and the repeats they asked for."""
    return record.phase in (SEARCH, SCREEN, REPEAT)
