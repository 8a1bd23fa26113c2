"""The scheduling loop: fill free slots from one queue and the proposal sources, submit, poll,
and record each ended trial.

Each result is journaled before anything else is done with it (the searcher told, MLflow
written), so a controller killed at any point resumes without losing or repeating a trial.
Proposals the (calibrated) memory model says cannot fit are recorded as `infeasible` and never
run. The loop never sleeps while results are arriving.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from orchestrator.backends import Backend, TrialHandle
from orchestrator.budget import Tally
from orchestrator.campaign import calibration_input
from orchestrator.costmodel import Calibration, CostModel, calibrate
from orchestrator.journal import SCREEN, SEARCH, Journal, TrialRecord
from orchestrator.proposals import Proposal, ProposalSource
from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig
from orchestrator.searchers import Searcher
from orchestrator.spec import CampaignSpec
from orchestrator.tracking_session import TrackingSession
from orchestrator.trial_requests import trial_request

POLL_INTERVAL_S = 0.2

# Called with ("submitted" | "finished", record) so a front end can show progress.
EventHook = Callable[[str, TrialRecord], None]


class SchedulingLoop:
    def __init__(self, spec: CampaignSpec, *, campaign_dir: Path, journal: Journal,
                 backend: Backend, searcher: Searcher, cost_model: CostModel, tally: Tally,
                 records: dict[str, TrialRecord], started_at: float,
                 tracking: TrackingSession | None = None, on_event: EventHook | None = None,
                 workdir: str | None = None):
        self.spec = spec
        self.campaign_dir = campaign_dir
        self.journal = journal
        self.backend = backend
        self.searcher = searcher
        self.base_model = cost_model
        self.cost_model = cost_model  # replaced by the calibrated model as trials end
        self.calibration: Calibration | None = None
        self.tally = tally
        self.records = records
        self.started_at = started_at
        self.tracking = tracking
        self.on_event = on_event or (lambda kind, record: None)
        self.workdir = workdir
        self.queue: deque[TrialRecord] = deque()  # trials to run before asking any source
        self.running: dict[str, tuple[TrialRecord, TrialHandle]] = {}
        self.stop_reason: str | None = None
        self._pending: list[TrialRecord] = []
        self._seen = {(r.config, r.phase) for r in records.values()}
        self.recalibrate()

    # ------------------------------------------------------------- what sources read

    @property
    def busy(self) -> int:
        return len(self.running) + len(self._pending)

    def is_new(self, config: ParallelConfig, phase: str) -> bool:
        return (config, phase) not in self._seen

    # ------------------------------------------------------------- the loop

    def run(self, sources: list[ProposalSource]) -> None:
        """Until nothing runs and no source has anything more."""
        while True:
            self._fill(sources)
            if not self.running:
                return
            if not self._collect():
                time.sleep(POLL_INTERVAL_S)

    def _fill(self, sources: list[ProposalSource]) -> None:
        self._pending = []
        while self.busy < self.spec.budget.max_concurrent:
            record = self.queue.popleft() if self.queue else self._propose(sources)
            if record is None:
                break
            if not record.done:  # infeasible ones are recorded without running
                self._pending.append(record)
        if self._pending:
            self._submit(self._pending)
        self._pending = []

    def _propose(self, sources: list[ProposalSource]) -> TrialRecord | None:
        budget = self.tally.state(self.spec.budget, self.started_at, pending=len(self._pending))
        self.stop_reason = budget.exhausted()  # patience can recover as running trials improve
        for source in sources:
            if source.budgeted and self.stop_reason:
                continue
            proposal = source.propose(self)
            if proposal is not None:
                return self._record(proposal)
        return None

    def _record(self, proposal: Proposal) -> TrialRecord:
        record = TrialRecord(f"t{len(self.records) + 1:04d}", proposal.config, phase=proposal.phase)
        self.records[record.trial_id] = record
        self._seen.add((record.config, record.phase))
        if proposal.prune:
            self._prune(record)
        return record

    def _prune(self, record: TrialRecord) -> None:
        """Record the trial as infeasible, without running it, if the memory model (scaled by
        calibration) says it cannot fit."""
        prediction = self.cost_model.estimate(record.config)
        scale = self.calibration.memory_scale if self.calibration else 1.0
        if prediction.fits_scaled(scale):
            return
        self._finish(record, TrialResult(
            status="infeasible", world_size=record.config.world_size,
            error=f"predicted {prediction.memory_gb:.2f} GB per device > "
            f"{prediction.capacity_gb:.2f} GB capacity",
            extra={"predicted_memory_gb": prediction.memory_gb},
        ))

    def request(self, record: TrialRecord):
        return trial_request(self.spec, record, self.campaign_dir, self.workdir, self.base_model)

    def _submit(self, records: list[TrialRecord]) -> None:
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
        for trial_id, (record, handle) in list(self.running.items()):
            result = handle.poll()
            if result is None:
                continue
            del self.running[trial_id]
            if result.world_size is None:
                result.world_size = record.config.world_size
            self._finish(record, result)
            ended += 1
        if ended:
            self.recalibrate()
        return ended

    def recalibrate(self) -> None:
        """Refit the model on the measured trials; cheap, so done often early and then on
        every 10th success."""
        measured = calibration_input(list(self.records.values()))
        successes = sum(1 for _, _, result in measured if result.ok)
        if successes < 30 or successes % 10 == 0:
            self.calibration = calibrate(self.base_model, measured) or self.calibration
            if self.calibration is not None:
                self.cost_model = self.calibration.model

    def _finish(self, record: TrialRecord, result: TrialResult) -> None:
        if result.status != "infeasible":
            predicted = self.cost_model.estimate(record.config)
            result.extra.setdefault("predicted_tokens_per_s", predicted.tokens_per_s)
            result.extra.setdefault("predicted_memory_gb", predicted.memory_gb_used)
        self.journal.record_finished(record, result)
        record.result = result
        record.finished_at = time.time()
        self.tally.finished(record)
        if teaches_searcher(record):
            self.searcher.tell(record.config, result)
        if self.tracking is not None:
            if self.tracking.behind:  # MLflow was down: write everything it missed
                self.tracking.sync(list(self.records.values()))
            else:
                self.tracking.track(record)
        self.on_event("finished", record)

    def cancel_running(self) -> None:
        for _, handle in self.running.values():
            handle.cancel()
        self.running.clear()


def teaches_searcher(record: TrialRecord) -> bool:
    """Searchers learn from the trials they proposed: search trials, or screens under halving."""
    return record.phase in (SEARCH, SCREEN)
