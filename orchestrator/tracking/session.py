"""A campaign's link to MLflow that never loses a result: the journal is the record, MLflow a
mirror. If MLflow is unreachable, trials stay journaled without a `tracked` event and are
written when it answers again (on the next trial, or on resume).

Layouts pruned as infeasible never ran, so they get no run: MLflow 3.17 draws FAILED and KILLED
runs with the same red cross and has no status for "not run", and a FINISHED run would show a
green tick and a zero duration among the measured trials (in a Frontier campaign, 124 of 145
rows). The trial table therefore lists what ran, and the campaign's run summarises the pruned
layouts: a `trials_infeasible` metric and `pruned_layouts.json` (layout, predicted memory,
reason). The journal keeps them as before.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.record.journal import Journal, TrialRecord, fidelity_of
from orchestrator.common.errors import one_line
from orchestrator.tracking.mirror import ArtifactsElsewhere, Tracker
from orchestrator.tracking.sqlite_store import StoreDamaged
from orchestrator.tracking.view import varying_knobs
from orchestrator.trial.folder import TrialFolder

log = logging.getLogger(__name__)
# An unreachable server should cost seconds, not MLflow's default minutes of retries: the
# journal keeps every result until the server is back.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


class TrackingSession:
    def __init__(self, uri: str, campaign: str, journal: Journal, campaign_dir: Path,
                 artifact_root: Path, campaign_params: dict[str, Any], retry_s: float = 30.0,
                 objective: Objective | None = None):
        if uri.startswith(("http://", "https://")):
            for key, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(key, value)
        self.uri = uri
        self.retry_s = retry_s
        self.campaign = campaign
        self.journal = journal
        self.campaign_dir = campaign_dir
        self.artifact_root = artifact_root
        self.campaign_params = campaign_params
        self.objective = objective  # orders the saved trial view of the experiment
        self.tracker: Tracker | None = None
        self.parent_run_id: str | None = journal.campaign_info().get("parent_run_id")
        self._down_since: float | None = None
        self.behind = False  # some finished trial is not in MLflow yet
        self.broken = False  # a store no retry mends (damaged, or another folder's artifacts)
        self._earlier: dict[str, str] | None = None  # trial runs MLflow held when first asked
        self._connect()

    def _connect(self) -> bool:
        try:
            remade = False
            if self.tracker is None:
                self.tracker = Tracker(self.uri, f"paratune/{self.campaign}",
                                       artifact_root=self.artifact_root, objective=self.objective,
                                       remake_half_made=True)
                remade = self.tracker.set_aside is not None
                if remade:
                    log.warning("the MLflow store %s was half-made (its set-up cut short, by a "
                                "full disk say); set it aside as %s and writing every finished "
                                "trial to a fresh store from the journal", self.uri.removeprefix(
                                    "sqlite:///"), self.tracker.set_aside)
            if self.parent_run_id is not None and not self.tracker.run_exists(self.parent_run_id):
                if not remade:
                    log.warning("MLflow at %s has lost campaign %s's run %s; writing the "
                                "campaign to it again from the journal", self.uri, self.campaign,
                                self.parent_run_id)
                self.parent_run_id = None
            if self.parent_run_id is None:
                self.parent_run_id = (self.tracker.campaign_run() or
                                      self.tracker.start_campaign(self.campaign, self.campaign_params))
                self.journal.append("campaign", parent_run_id=self.parent_run_id)
            self._down_since = None
            return True
        except Exception as exc:
            self._went_down(exc)
            return False

    def _went_down(self, exc: Exception) -> None:
        if isinstance(exc, (StoreDamaged, ArtifactsElsewhere)):  # no retry mends these
            if not self.broken:
                log.warning(one_line(str(exc)))
            self.broken = True
        elif self._down_since is None:
            log.warning(one_line(f"MLflow at {self.uri} is unavailable ({exc}); results stay "
                                 "in the journal and are written when it is back", 400))
        self.tracker = None
        self._down_since = time.monotonic()

    def _available(self) -> bool:
        if self.tracker is not None and self.parent_run_id is not None:
            return True
        if self.broken:
            return False
        if self._down_since is not None and time.monotonic() - self._down_since < self.retry_s:
            return False
        return self._connect()

    def _call(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self._went_down(exc)
            return None

    def mirror(self, record: TrialRecord, records: list[TrialRecord]) -> None:
        """Write a finished trial to MLflow; after an outage, everything MLflow missed."""
        if self.behind:
            self.sync(records)
        else:
            self.track(record)
        self._show_knobs(records)

    def _show_knobs(self, records: list[TrialRecord]) -> None:
        """Make the knobs the trials that ran vary the knob columns of the saved view, once
        two layouts ran (a tag write only when that set changes)."""
        ran = [r.config.to_params() for r in records if not r.pruned and r.result is not None]
        knobs = varying_knobs(ran)
        if knobs and self.tracker is not None:
            self._call(self.tracker.show_knobs, knobs)

    def track(self, record: TrialRecord) -> None:
        if record.pruned:
            return  # never ran: summarised on the campaign's run at the end
        if not self._available():
            self.behind = True
            return
        if not self._replace_earlier_run(record):
            self.behind = True
            return
        run_id = self._call(
            self.tracker.log_trial, self.parent_run_id, record.trial_id, record.config,
            record.result, artifacts=TrialFolder.of(self.campaign_dir, record.trial_id).artifacts(),
            extra_params={"fidelity": fidelity_of(record.phase)},
            started_at=record.submitted_at, ended_at=record.finished_at,
        )
        if run_id:
            record.run_id = run_id
            self.journal.record_tracked(record.trial_id, record.config, run_id)
        else:
            self.behind = True

    def _replace_earlier_run(self, record: TrialRecord) -> bool:
        """Delete a run MLflow holds for this trial id that the journal does not name (its
        journal was cut or lost, and the trial ran again), so each trial keeps one run; False
        while MLflow cannot say."""
        if self._earlier is None:
            existing = self._call(self.tracker.trial_runs)
            if existing is None:
                return False
            self._earlier = {t: run for t, (run, _) in existing.items()}
        earlier = self._earlier.pop(record.trial_id, None)
        if earlier is not None and earlier != record.run_id:
            self._call(self.tracker.client.delete_run, earlier)
        return True

    def sync(self, records: list[TrialRecord]) -> int:
        """Write every finished trial MLflow has not got yet; how many were written.

        A controller killed between creating a trial's run and journaling `tracked` left a run
        behind: a finished one is adopted, an unfinished one deleted and written again, so
        MLflow ends with exactly one run per trial. A store that lost runs the journal says it
        had (replaced, or restored from an older copy) gets them written again."""
        ran = [r for r in records if r.done and not r.pruned]
        self.behind = False
        if not ran or not self._available():
            self.behind = any(r.run_id is None for r in ran)
            return 0
        existing = self._call(self.tracker.trial_runs)
        if existing is None:  # unknown which runs exist: writing now could duplicate one
            self.behind = True
            return 0
        for record in ran:
            if record.run_id is not None and record.trial_id not in existing:
                record.run_id = None  # the store lost it
        missing = [r for r in ran if r.run_id is None]
        for record in missing:
            run_id, finished = existing.get(record.trial_id, (None, False))
            if run_id and finished:
                record.run_id = run_id
                self.journal.record_tracked(record.trial_id, record.config, run_id)
                continue
            if run_id:
                self._call(self.tracker.client.delete_run, run_id)
            self.track(record)
        return sum(1 for r in missing if r.run_id is not None)

    def finish(self, summary: dict[str, Any], records: list[TrialRecord], metric: str) -> None:
        if self.broken:
            return
        self._down_since = None  # the end is worth one more try, whatever the retry interval
        self.sync(records)
        if not self._available():
            return
        self._show_knobs(records)
        table = {
            "trial_id": [r.trial_id for r in records],
            "config": [r.config.key() for r in records],
            "fidelity": [fidelity_of(r.phase) for r in records],
            "status": [r.result.status if r.result else "running" for r in records],
            metric: [r.result.metric(metric) if r.result else None for r in records],
            "peak_memory_gb": [r.result.peak_memory_gb if r.result else None for r in records],
        }
        layouts = [r for r in records if r.pruned]
        pruned_table = {
            "trial_id": [r.trial_id for r in layouts],
            "config": [r.config.key() for r in layouts],
            "predicted_memory_gb": [r.result.extra.get("predicted_memory_gb") for r in layouts],
            "reason": [r.result.error for r in layouts],
        }
        best = summary.get("best_config")
        note = (f"ParaTune campaign **{self.campaign}**: best `{best}` (trial "
                f"{summary.get('best_trial')}). Export it with `paratune best {self.campaign} "
                f"--format torchrun|sbatch|deepspeed|megatron-lm|megatron-deepspeed|torchtitan`; "
                f"every trial is in `campaign_summary.json`.") if best else None
        if layouts:
            note = (note or f"ParaTune campaign **{self.campaign}**.") + (
                f" {len(layouts)} layouts were pruned as infeasible (predicted not to fit) and "
                f"never ran: they are in `pruned_layouts.json`, not among the trial runs.")
        self._call(self.tracker.finish_campaign, self.parent_run_id, summary, table, note,
                   pruned_table if layouts else None)
