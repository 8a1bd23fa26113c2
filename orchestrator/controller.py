"""The controller: runs a campaign from the searcher's proposals to recorded results.

Loop: ask the searcher, prune what the memory model says cannot fit (recorded as `infeasible`,
never run), submit the rest within the budget and concurrency limit, poll, journal each result,
tell the searcher and log to MLflow. The journal is written before anything else is done with a
trial, so a controller killed at any point resumes without losing or repeating a trial.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.backends import Backend, TrialHandle, TrialRequest, make_backend
from orchestrator.costmodel import Calibration, calibrate, cost_model_for
from orchestrator.errors import CampaignStateError
from orchestrator.journal import Journal, TrialRecord
from orchestrator.launch import (
    DEEPSPEED_CONFIG_FILE,
    command_argv,
    deepspeed_config,
    job_settings,
)
from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig, SearchSpace
from orchestrator.searchers import Searcher, make_searcher
from orchestrator.spec import CampaignSpec
from orchestrator.tracking import Tracker

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.jsonl"
SPEC_FILE = "spec.yaml"
POLL_INTERVAL_S = 0.2

# Called with ("submitted" | "finished", record) so a front end can show progress.
EventHook = Callable[[str, TrialRecord], None]


def best_record(records: list[TrialRecord], metric: str, mode: str) -> TrialRecord | None:
    scored = [r for r in records if r.result and r.result.ok and r.result.metric(metric) is not None]
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

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.records:
            status = record.result.status if record.result else "running"
            counts[status] = counts.get(status, 0) + 1
        return counts


class Controller:
    def __init__(
        self,
        spec: CampaignSpec,
        *,
        backend: Backend | None = None,
        on_event: EventHook | None = None,
    ):
        self.spec = spec
        self.dir = spec.campaign_dir().resolve()
        self.journal = Journal(self.dir / JOURNAL_FILE)
        self.backend = backend or make_backend(
            spec.backend, cost_model=cost_model_for(spec), steps=spec.trial.steps
        )
        self.on_event = on_event or (lambda kind, record: None)
        self.base_model = cost_model_for(spec)
        self.cost_model = self.base_model  # replaced by the calibrated model as trials end
        self.calibration: Calibration | None = None
        self.tracker: Tracker | None = None
        self.parent_run_id: str | None = None
        self.running: dict[str, tuple[TrialRecord, TrialHandle]] = {}
        self.workdir = spec.trial.workdir or os.getcwd()

    # ------------------------------------------------------------------ entry points

    def run(self, *, resume: bool = False) -> CampaignSummary:
        records = self.journal.trials()
        if records and not resume:
            raise CampaignStateError(
                f"campaign {self.spec.name!r} already has trials in {self.dir}; run "
                f"`paratune resume {self.spec.name}` or choose another name"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        if not (self.dir / SPEC_FILE).exists():
            (self.dir / SPEC_FILE).write_text(yaml.safe_dump(self.spec.model_dump(mode="json")))
            self.journal.append("campaign", name=self.spec.name)

        s = self.spec
        searcher = make_searcher(
            s.search.algorithm, SearchSpace.from_spec(s).candidates(), seed=s.search.seed,
            cost_model=self.base_model, metric=s.objective.metric, mode=s.objective.mode,
            stop_margin=s.search.stop_margin,
        )
        queue = self._replay(records, searcher)
        self._recalibrate(records)
        self._start_tracking(records)
        try:
            exhausted = self._loop(records, searcher, queue)
        except BaseException:
            self._cancel_running()
            raise
        summary = self.summary(complete=exhausted or self._executed(records) >= self._budget())
        if self.tracker and self.parent_run_id and summary.complete:
            self._safely(self.tracker.finish_campaign, self.parent_run_id, self._summary_metrics(summary))
        return summary

    def summary(self, complete: bool = False) -> CampaignSummary:
        records = sorted(self.journal.trials().values(), key=lambda r: r.trial_id)
        best = best_record(records, self.spec.objective.metric, self.spec.objective.mode)
        return CampaignSummary(self.spec.name, records, best, complete)

    # ------------------------------------------------------------------ the loop

    def _replay(self, records: dict[str, TrialRecord], searcher: Searcher) -> deque[TrialRecord]:
        """Tell the searcher what finished; queue what was running when the last controller died."""
        queue: deque[TrialRecord] = deque()
        for record in sorted(records.values(), key=lambda r: r.trial_id):
            if record.done:
                searcher.tell(record.config, record.result)
            else:
                self.backend.cleanup(record.handle, self.dir / "trials" / record.trial_id)
                queue.append(record)
        return queue

    def _budget(self) -> int:
        return self.spec.budget.max_trials

    @staticmethod
    def _executed(records: dict[str, TrialRecord]) -> int:
        """Trials that took (or are taking) backend time; infeasible ones were never run."""
        return sum(
            1 for r in records.values()
            if not (r.result and r.result.status == "infeasible")
        )

    def _loop(
        self, records: dict[str, TrialRecord], searcher: Searcher, queue: deque[TrialRecord]
    ) -> bool:
        """Run until the budget is spent or the space exhausted; True if exhausted."""
        seen = {r.config for r in records.values()}
        exhausted = False
        while True:
            while (
                len(self.running) < self.spec.budget.max_concurrent
                and (queue or self._executed(records) < self._budget())
            ):
                record = queue.popleft() if queue else self._next_record(records, searcher, seen)
                if record is None:
                    exhausted = True
                    break
                if record.done:  # infeasible: recorded without running
                    continue
                self._submit(record)
            if not self.running:
                return exhausted
            if not self._collect(records, searcher):
                time.sleep(POLL_INTERVAL_S)

    def _next_record(
        self, records: dict[str, TrialRecord], searcher: Searcher, seen: set[ParallelConfig]
    ) -> TrialRecord | None:
        while True:
            proposed = searcher.ask(1)
            if not proposed:
                return None
            config = proposed[0]
            if config in seen:
                continue
            seen.add(config)
            record = TrialRecord(f"t{len(records) + 1:04d}", config)
            records[record.trial_id] = record
            prediction = self.cost_model.estimate(config)
            scale = self.calibration.memory_scale if self.calibration else 1.0
            if not prediction.fits_scaled(scale):
                result = TrialResult(
                    status="infeasible",
                    error=f"predicted {prediction.memory_gb:.2f} GB per device > "
                    f"{prediction.capacity_gb:.2f} GB capacity",
                    world_size=config.world_size,
                    extra={"predicted_memory_gb": prediction.memory_gb},
                )
                self._finish(record, result, searcher)
            return record

    def _submit(self, record: TrialRecord) -> None:
        trial_dir = self.dir / "trials" / record.trial_id
        command, files = None, {}
        if self.spec.trial.command:
            command = command_argv(self.spec, record.config, record.trial_id, str(trial_dir))
            files[DEEPSPEED_CONFIG_FILE] = json.dumps(deepspeed_config(self.spec, record.config))
        request = TrialRequest(
            trial_id=record.trial_id,
            config=record.config,
            trial_dir=trial_dir,
            world_size=record.config.world_size,
            job_settings=job_settings(self.spec, record.config, record.trial_id),
            timeout_s=self.spec.trial.timeout_s,
            env=dict(self.spec.trial.env),
            command=command,
            workdir=self.workdir,
            files=files,
        )
        handle = self.backend.submit(request)
        record.handle = handle.info()
        record.submitted_at = time.time()
        self.journal.record_submitted(record.trial_id, record.config, record.handle)
        self.running[record.trial_id] = (record, handle)
        self.on_event("submitted", record)

    def _collect(self, records: dict[str, TrialRecord], searcher: Searcher) -> int:
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
            self._recalibrate(records)
        return ended

    def _recalibrate(self, records: dict[str, TrialRecord]) -> None:
        """Refit the model on the ok trials; cheap, so done often early and then every 10th."""
        measured = [(r.trial_id, r.config, r.result) for r in records.values()
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
        self.journal.record_finished(record.trial_id, record.config, result)
        record.result = result
        record.finished_at = time.time()
        searcher.tell(record.config, result)
        self._track(record)
        self.on_event("finished", record)

    def _cancel_running(self) -> None:
        for _, handle in self.running.values():
            handle.cancel()
        self.running.clear()

    # ------------------------------------------------------------------ tracking

    def _start_tracking(self, records: dict[str, TrialRecord]) -> None:
        if not self.spec.tracking.enabled:
            return
        self.parent_run_id = self.journal.campaign_info().get("parent_run_id")
        try:
            self.tracker = Tracker(
                self.spec.tracking_uri(), f"paratune/{self.spec.name}",
                artifact_root=self.spec.runs_dir() / "mlartifacts",
            )
            if self.parent_run_id is None:
                self.parent_run_id = self.tracker.start_campaign(self.spec.name, self._campaign_params())
                self.journal.append("campaign", parent_run_id=self.parent_run_id)
        except Exception as exc:  # the journal keeps results; they are synced on resume
            log.warning("MLflow at %s is unavailable (%s); results stay in the journal",
                        self.spec.tracking_uri(), exc)
            self.tracker = None
            return
        for record in records.values():  # results journaled while MLflow was unreachable
            if record.done and record.run_id is None:
                self._track(record)

    def _track(self, record: TrialRecord) -> None:
        if self.tracker is None or self.parent_run_id is None:
            return
        run_id = self._safely(
            self.tracker.log_trial, self.parent_run_id, record.trial_id, record.config,
            record.result, log_path=self.dir / "trials" / record.trial_id / "trial.log",
        )
        if run_id:
            record.run_id = run_id
            self.journal.record_tracked(record.trial_id, record.config, run_id)

    def _safely(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            log.warning("MLflow call %s failed (%s); results stay in the journal", fn.__name__, exc)
            return None

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
        return out


def load_campaign_spec(runs_dir: Path, name: str) -> CampaignSpec:
    """The spec a campaign was started with, as saved in its directory."""
    from orchestrator.spec import spec_from_dict

    path = runs_dir / name / SPEC_FILE
    if not path.exists():
        raise CampaignStateError(
            f"no campaign {name!r} under {runs_dir}/ (missing {path}); start it with "
            "`paratune run SPEC.yaml`, or pass --runs-dir"
        )
    data = yaml.safe_load(path.read_text())
    data.setdefault("tracking", {})["runs_dir"] = str(runs_dir)
    return spec_from_dict(data, source=str(path))
