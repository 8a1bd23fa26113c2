"""The controller: runs a campaign from the searcher's proposals to recorded results.

Loop: ask the searcher, prune what the (calibrated) memory model says cannot fit (recorded as
`infeasible`, never run), submit the rest within the budget and concurrency limit, poll,
journal each result, tell the searcher and mirror to MLflow. The journal is written before
anything else is done with a trial, so a controller killed at any point resumes without losing
or repeating a trial. With `search.fidelity`, proposals are screened with few steps and the
best screened ones re-measured in full (fidelity.py).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from orchestrator import fidelity as halving
from orchestrator.backends import Backend, TrialHandle, TrialRequest, make_backend
from orchestrator.budget import BudgetState, Tally
from orchestrator.costmodel import Calibration, calibrate, cost_model_for
from orchestrator.errors import CampaignStateError
from orchestrator.journal import Journal, TrialRecord
from orchestrator.lock import CampaignLock
from orchestrator.launch import DEEPSPEED_CONFIG_FILE, command_argv, deepspeed_config, job_settings
from orchestrator.result import TrialResult
from orchestrator.scaling import SCALING, scaled_config
from orchestrator.search_spaces import ParallelConfig, SearchSpace
from orchestrator.searchers import Searcher, make_searcher
from orchestrator.spec import SPEC_FILE, CampaignSpec, load_campaign_spec  # noqa: F401 - re-export
from orchestrator.tracking_session import TrackingSession
from orchestrator.warm_start import warm_start

JOURNAL_FILE = "journal.jsonl"
POLL_INTERVAL_S = 0.2

# Called with ("submitted" | "finished", record) so a front end can show progress.
EventHook = Callable[[str, TrialRecord], None]


def best_record(records: list[TrialRecord], metric: str, mode: str) -> TrialRecord | None:
    scored = [r for r in halving.comparable(records)
              if r.result and r.result.ok and r.result.metric(metric) is not None]
    if not scored:
        return None
    pick = max if mode == "max" else min
    return pick(scored, key=lambda r: r.result.metric(metric))


@dataclass
class CampaignSummary:
    name: str
    records: list[TrialRecord]
    best: TrialRecord | None
    complete: bool
    stop_reason: str | None = None

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.records:
            status = record.result.status if record.result else "running"
            counts[status] = counts.get(status, 0) + 1
        return counts


class Controller:
    def __init__(self, spec: CampaignSpec, *, backend: Backend | None = None,
                 on_event: EventHook | None = None):
        self.spec = spec
        self.dir = spec.campaign_dir().resolve()
        self.journal = Journal(self.dir / JOURNAL_FILE)
        self.base_model = cost_model_for(spec)
        self.cost_model = self.base_model  # replaced by the calibrated model as trials end
        self.calibration: Calibration | None = None
        self.backend = backend
        self._own_backend = backend is None  # made here, so shut down here
        self.on_event = on_event or (lambda kind, record: None)
        self.tracking: TrackingSession | None = None
        self.running: dict[str, tuple[TrialRecord, TrialHandle]] = {}
        self.records: dict[str, TrialRecord] = {}
        self.workdir = spec.trial.workdir or os.getcwd()
        self.tally = Tally(spec.objective.metric, spec.objective.mode)
        self.stop_reason: str | None = None
        self._scaling = False  # in the scaling study: run only its queue

    # ------------------------------------------------------------------ entry points

    def run(self, *, resume: bool = False) -> CampaignSummary:
        with CampaignLock(self.dir, self.spec.name):
            if self.backend is None:
                self.backend = make_backend(self.spec.backend, cost_model=self.base_model,
                                            steps=self.spec.trial.steps,
                                            gpus_per_node=self.spec.gpus_per_node,
                                            use_gpus=self.spec.cluster.device != "cpu")
            try:
                return self._run(resume)
            finally:
                if self._own_backend and hasattr(self.backend, "shutdown"):
                    self.backend.shutdown()

    def _run(self, resume: bool) -> CampaignSummary:
        self.records = self.journal.trials()
        if self.records and not resume:
            raise CampaignStateError(
                f"campaign {self.spec.name!r} already has trials in {self.dir}; run "
                f"`paratune resume {self.spec.name}` or choose another name"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        if not (self.dir / SPEC_FILE).exists():
            (self.dir / SPEC_FILE).write_text(yaml.safe_dump(self.spec.model_dump(mode="json")))
            self.journal.append("campaign", name=self.spec.name, started_at=time.time())
        searcher = self._searcher()
        queue = self._replay(searcher)
        self.tally = Tally.of(list(self.records.values()), self.spec.objective.metric,
                              self.spec.objective.mode)
        self._recalibrate()
        if self.spec.tracking.enabled:
            self.tracking = TrackingSession(
                self.spec.tracking_uri(), self.spec.name, self.journal, self.dir / "trials",
                self.spec.runs_dir() / "mlartifacts", self._campaign_params(),
                retry_s=self.spec.tracking.retry_s)
            self.tracking.sync(list(self.records.values()))
        try:
            exhausted = self._loop(searcher, queue)
            if self.spec.scale.study and (exhausted or self.stop_reason is not None):
                self._scaling_study(searcher)
        except BaseException:
            self._cancel_running()
            raise
        summary = self.summary(complete=exhausted or self.stop_reason is not None)
        summary.stop_reason = self.stop_reason or ("search space exhausted" if exhausted else None)
        if self.tracking is not None and summary.complete:
            self.tracking.finish(self._summary_metrics(summary), summary.records,
                                 self.spec.objective.metric)
        return summary

    def summary(self, complete: bool = False) -> CampaignSummary:
        records = sorted(self.journal.trials().values(), key=lambda r: r.trial_id)
        best = best_record(records, self.spec.objective.metric, self.spec.objective.mode)
        return CampaignSummary(self.spec.name, records, best, complete)

    def budget_state(self) -> BudgetState:
        records = list(self.journal.trials().values())
        tally = Tally.of(records, self.spec.objective.metric, self.spec.objective.mode)
        return tally.state(self.spec.budget, self._started_at())

    # ------------------------------------------------------------------ setup

    def _searcher(self) -> Searcher:
        s = self.spec
        cost_model = self.base_model
        prior = None
        if s.search.warm_start:
            cost_model, prior = warm_start(s, s.search.warm_start, self.base_model)
            self.base_model = self.cost_model = cost_model
        searcher = make_searcher(
            s.search.algorithm, SearchSpace.from_spec(s).candidates(), seed=s.search.seed,
            cost_model=cost_model, metric=s.objective.metric, mode=s.objective.mode,
            stop_margin=s.search.stop_margin,
        )
        if prior and hasattr(searcher, "add_prior"):
            searcher.add_prior(prior)
        return searcher

    def _started_at(self) -> float:
        info = self.journal.campaign_info()
        return info.get("started_at") or time.time()

    def _replay(self, searcher: Searcher) -> deque[TrialRecord]:
        """Tell the searcher what finished; queue what was running when the last controller died."""
        queue: deque[TrialRecord] = deque()
        for record in sorted(self.records.values(), key=lambda r: r.trial_id):
            if record.done:
                if self._tells_searcher(record):
                    searcher.tell(record.config, record.result)
                continue
            reattach = getattr(self.backend, "reattach", None)
            handle = reattach(record.handle, self._request(record)) if reattach else None
            if handle is not None:  # its cluster job still runs: wait for it
                self.running[record.trial_id] = (record, handle)
            else:
                self.backend.cleanup(record.handle, self.dir / "trials" / record.trial_id)
                queue.append(record)
        return queue

    # ------------------------------------------------------------------ the loop

    def _loop(self, searcher: Searcher, queue: deque[TrialRecord]) -> bool:
        """Run until a budget is spent or the space exhausted; True if exhausted."""
        seen = {(r.config, r.fidelity) for r in self.records.values()}
        started_at = self._started_at()
        exhausted = False
        while True:
            batch: list[TrialRecord] = []
            while len(self.running) + len(batch) < self.spec.budget.max_concurrent:
                if queue:
                    record = queue.popleft()
                elif self._scaling:
                    break
                else:
                    self.tally.trials += len(batch)  # count the batch while deciding
                    self.stop_reason = self.tally.state(self.spec.budget, started_at).exhausted()
                    self.tally.trials -= len(batch)
                    if self.stop_reason:
                        break
                    record = self._promotion(seen) or self._next_record(searcher, seen)
                    if record is None:
                        exhausted = True
                        break
                if not record.done:  # infeasible ones are recorded without running
                    batch.append(record)
            if batch:
                self._submit(batch)
            if not self.running:
                return exhausted
            if not self._collect(searcher):
                time.sleep(POLL_INTERVAL_S)

    def _scaling_study(self, searcher: Searcher) -> None:
        """Run the best layout at each node count of `scale.study_nodes` (scaling.py)."""
        best = best_record(list(self.records.values()), self.spec.objective.metric,
                           self.spec.objective.mode)
        if best is None:
            return
        done = {r.config.world_size for r in self.records.values() if r.fidelity == SCALING}
        queue: deque[TrialRecord] = deque()
        for nodes in sorted(set(self.spec.scale.study_nodes)):
            config = scaled_config(best.config, self.spec.scale.nodes, nodes, self.spec.scale.study)
            if config is None or config.world_size in done:
                continue
            record = self._new_record(config, SCALING)
            if not self._prune(record, searcher):
                queue.append(record)
        self._scaling = True
        self._loop(searcher, queue)

    def _new_record(self, config: ParallelConfig, fidelity: str) -> TrialRecord:
        record = TrialRecord(f"t{len(self.records) + 1:04d}", config, fidelity=fidelity)
        self.records[record.trial_id] = record
        return record

    def _promotion(self, seen: set) -> TrialRecord | None:
        if not self.spec.search.fidelity:
            return None
        for config in halving.promotions(list(self.records.values()), self.spec.search.fidelity,
                                         self.spec.objective.metric, self.spec.objective.mode):
            if (config, halving.FULL) not in seen:
                seen.add((config, halving.FULL))
                return self._new_record(config, halving.FULL)
        return None

    def _next_record(self, searcher: Searcher, seen: set) -> TrialRecord | None:
        fidelity = halving.SCREEN if self.spec.search.fidelity else halving.FULL
        while True:
            proposed = searcher.ask(1)
            if not proposed:
                return None
            config = proposed[0]
            if (config, fidelity) in seen:
                continue
            seen.add((config, fidelity))
            record = self._new_record(config, fidelity)
            self._prune(record, searcher)
            return record

    def _prune(self, record: TrialRecord, searcher: Searcher) -> bool:
        """Record the trial as infeasible, without running it, if the memory model (scaled by
        calibration) says it cannot fit; True if so."""
        prediction = self.cost_model.estimate(record.config)
        scale = self.calibration.memory_scale if self.calibration else 1.0
        if prediction.fits_scaled(scale):
            return False
        self._finish(record, TrialResult(
            status="infeasible", world_size=record.config.world_size,
            error=f"predicted {prediction.memory_gb:.2f} GB per device > "
            f"{prediction.capacity_gb:.2f} GB capacity",
            extra={"predicted_memory_gb": prediction.memory_gb},
        ), searcher)
        return True

    def _request(self, record: TrialRecord) -> TrialRequest:
        trial_dir = self.dir / "trials" / record.trial_id
        settings = job_settings(self.spec, record.config, record.trial_id)
        if record.fidelity == halving.SCREEN:
            settings["steps"] = self.spec.search.fidelity.screening_steps
        command, files = None, {}
        if self.spec.trial.command:
            command = command_argv(self.spec, record.config, record.trial_id, str(trial_dir))
            files[DEEPSPEED_CONFIG_FILE] = json.dumps(deepspeed_config(self.spec, record.config))
        return TrialRequest(
            trial_id=record.trial_id, config=record.config, trial_dir=trial_dir,
            world_size=record.config.world_size, job_settings=settings,
            timeout_s=self.spec.trial.timeout_s, env=dict(self.spec.trial.env),
            command=command, workdir=self.workdir, files=files,
        )

    def _submit(self, records: list[TrialRecord]) -> None:
        """Hand trials to the backend; several of one shape at once where it takes arrays."""
        requests = [self._request(r) for r in records]
        if len(records) > 1 and hasattr(self.backend, "submit_many") and \
                len({r.config.world_size for r in records}) == 1:
            handles = self.backend.submit_many(requests)
        else:
            handles = [self.backend.submit(request) for request in requests]
        for record, handle in zip(records, handles):
            self._started(record, handle)

    def _started(self, record: TrialRecord, handle: TrialHandle) -> None:
        first_submission = record.submitted_at is None  # resumed trials were counted already
        record.handle = handle.info()
        record.submitted_at = time.time()
        self.journal.record_submitted(record)
        if first_submission:
            self.tally.submitted()
        self.running[record.trial_id] = (record, handle)
        self.on_event("submitted", record)

    def _collect(self, searcher: Searcher) -> int:
        """Record every trial that has ended; return how many did."""
        ended = 0
        for trial_id, (record, handle) in list(self.running.items()):
            result = handle.poll()
            if result is None:
                continue
            del self.running[trial_id]
            if result.world_size is None:
                result.world_size = record.config.world_size
            self._finish(record, result, searcher)
            ended += 1
        if ended:
            self._recalibrate()
        return ended

    def _recalibrate(self) -> None:
        """Refit the model on the ok trials; cheap, so done often early and then every 10th."""
        measured = [(r.trial_id, r.config, r.result) for r in self.records.values()
                    if r.result is not None and r.result.ok]
        if len(measured) < 30 or len(measured) % 10 == 0:
            self.calibration = calibrate(self.base_model, measured) or self.calibration
            if self.calibration is not None:
                self.cost_model = self.calibration.model

    def _finish(self, record: TrialRecord, result: TrialResult, searcher: Searcher) -> None:
        if result.status != "infeasible":
            predicted = self.cost_model.estimate(record.config)
            result.extra.setdefault("predicted_tokens_per_s", predicted.tokens_per_s)
            result.extra.setdefault("predicted_memory_gb", predicted.memory_gb_used)
        self.journal.record_finished(record, result)
        record.result = result
        record.finished_at = time.time()
        self.tally.finished(record)
        if self._tells_searcher(record):
            searcher.tell(record.config, result)
        if self.tracking is not None:
            if self.tracking.behind:  # MLflow was down: write everything it missed
                self.tracking.sync(list(self.records.values()))
            else:
                self.tracking.track(record)
        self.on_event("finished", record)

    def _tells_searcher(self, record: TrialRecord) -> bool:
        """Searchers learn from search trials: screens under halving, else full ones."""
        wanted = halving.SCREEN if self.spec.search.fidelity else halving.FULL
        return record.fidelity == wanted

    def _cancel_running(self) -> None:
        for _, handle in self.running.values():
            handle.cancel()
        self.running.clear()

    # ------------------------------------------------------------------ reporting

    def _campaign_params(self) -> dict[str, Any]:
        s = self.spec
        return {
            "model": s.model.name, "model_params": s.model.num_params, "cluster": s.cluster.name,
            "world_size": s.world_size, "nodes": s.scale.nodes,
            "global_batch_size": s.scale.global_batch_size, "search": s.search.algorithm,
            "objective": f"{s.objective.mode} {s.objective.metric}",
            "max_trials": s.budget.max_trials, "backend": s.backend.kind,
        }

    def _summary_metrics(self, summary: CampaignSummary) -> dict[str, Any]:
        out: dict[str, Any] = {f"trials_{k}": v for k, v in summary.counts().items()}
        if self.calibration is not None:
            out["calibration_median_abs_error"] = self.calibration.median_abs_error
            out["calibration_spearman"] = self.calibration.spearman
        if summary.best is not None:
            metric = self.spec.objective.metric
            out[f"best_{metric}"] = summary.best.result.metric(metric)
            out["best_trial"] = summary.best.trial_id
            out["best_config"] = summary.best.config.key()
        if summary.stop_reason:
            out["stop_reason"] = summary.stop_reason
        return out
