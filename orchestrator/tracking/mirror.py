"""MLflow tracking: one experiment per campaign, a parent run for it, one child run per trial.

Each trial is written with one `MlflowClient.log_batch` call (about 30 ms here, against about
200 ms through the fluent API). Config fields become params, result fields metrics (per-step
times as a series) at the precision a person reads them (`shown`), status and failure reason
tags, and the trial log an artifact. A trial's run starts and ends when the trial did (the
journal's times), not when it is written. An SQLite store is opened as sqlite_store.py says.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse
from typing import Any

from orchestrator.common.objective import Objective
from orchestrator.result import METRIC_FIELDS, TrialResult
from orchestrator.space import Layout
from orchestrator.tracking.half_made import is_half_made, set_aside, sqlite_file
from orchestrator.tracking.sqlite_store import check_sqlite_store, fast_sqlite, first_use
from orchestrator.tracking.view import VIEW_TAG, experiment_tags, run_name, view_knobs

MAX_TAG_CHARS = 5000
# MLflow draws a tqdm bar on stderr for artifact transfers; the campaign's display is ours.
QUIET_ARTIFACTS = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


class ArtifactsElsewhere(RuntimeError):
    """The experiment keeps its artifacts outside the runs directory it was opened from."""


def _check_artifacts_here(experiment: Any, artifact_root: Path | None) -> None:
    """Refuse a store whose experiment writes its artifacts outside `artifact_root`: MLflow
    keeps artifact locations absolute, so a copied runs directory would write into the
    original's."""
    location = experiment.artifact_location or ""
    if artifact_root is None or not location.startswith("file:"):
        return
    where = Path(urlparse(location).path).resolve()
    root = artifact_root.resolve()
    if where != root and root not in where.parents:
        raise ArtifactsElsewhere(
            f"experiment {experiment.name} keeps its artifacts in {where}, outside this runs "
            f"directory's {root} (a copied or moved runs directory); nothing is written there: "
            "use the original runs directory, or give the copy a tracking.uri of its own")


def shown(name: str, value: float) -> float:
    """A metric as the UI should show it: MFU (a fraction) to 4 decimals, 1,000 and above to
    1 decimal (tokens/s 3702.0, not 3702.025123), smaller values to 4 significant figures."""
    if not math.isfinite(value) or value == 0:
        return value
    if name == "mfu":
        return round(value, 4)
    if abs(value) >= 1000:
        return round(value, 1)
    return float(f"{value:.4g}")


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


class Tracker:
    def __init__(self, uri: str, experiment: str, artifact_root: Path | None = None,
                 objective: Objective | None = None, remake_half_made: bool = False,
                 knobs: list[str] | None = None):
        """Open (or create) the experiment and make sure it carries the experiment kind and,
        given the campaign's objective, the saved trial view (view.py) with `knobs` as its
        knob columns (None: those the experiment's view has, or view.KNOBS). `remake_half_made`:
        a SQLite store whose set-up was cut short is set aside and made anew (half_made.py;
        `set_aside` then names the copy), for a caller that writes the journal to it again."""
        if uri.startswith("sqlite:"):
            fast_sqlite()
        for key, value in QUIET_ARTIFACTS.items():  # a user's own setting wins
            os.environ.setdefault(key, value)
        self.uri = uri
        self.set_aside: Path | None = None
        self.objective, self.knobs = objective, knobs
        check_sqlite_store(uri)
        with first_use(uri):
            try:
                self._open(experiment, artifact_root)
            except Exception:
                store = sqlite_file(uri)
                if not (remake_half_made and store and is_half_made(store)):
                    raise
                self.set_aside = set_aside(store)
                self._open(experiment, artifact_root)

    def _open(self, experiment: str, artifact_root: Path | None) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment_id = self._experiment(experiment, artifact_root)

    def show_knobs(self, knobs: list[str]) -> None:
        """Make `knobs` the knob columns of the saved trial view."""
        if knobs != self.knobs and self.objective is not None:
            self.knobs = knobs
            tag = experiment_tags(self.objective, knobs)[VIEW_TAG]
            self.client.set_experiment_tag(self.experiment_id, VIEW_TAG, tag)

    def _experiment(self, name: str, artifact_root: Path | None) -> str:
        found = self.client.get_experiment_by_name(name)
        if self.knobs is None and found is not None and VIEW_TAG in found.tags:
            self.knobs = view_knobs(found.tags[VIEW_TAG])
        tags = experiment_tags(self.objective, self.knobs)
        if found is not None:
            if not self.uri.startswith(("http://", "https://")):  # a server keeps its own
                _check_artifacts_here(found, artifact_root)
            for key, value in tags.items():  # experiments of older campaigns get them on resume
                if found.tags.get(key) != value:
                    self.client.set_experiment_tag(found.experiment_id, key, value)
            return found.experiment_id
        location = None
        if artifact_root is not None and not self.uri.startswith(("http://", "https://")):
            location = (artifact_root / name).resolve().as_uri()
        return self.client.create_experiment(name, artifact_location=location, tags=tags)

    def run_exists(self, run_id: str) -> bool:
        """False only when the store answers that it has no such run."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return False
            raise
        return True

    def campaign_run(self) -> str | None:
        """The campaign's run already in this experiment (the newest), if any: a campaign
        whose journal lost its `parent_run_id` keeps the run it had."""
        found = self.client.search_runs(
            [self.experiment_id], filter_string="tags.`paratune.kind` = 'campaign'",
            order_by=["attributes.start_time DESC"], max_results=1)
        return found[0].info.run_id if found else None

    def start_campaign(self, name: str, params: dict[str, Any]) -> str:
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={"paratune.kind": "campaign"}
        )
        self._log(run.info.run_id, params=params)
        return run.info.run_id

    def log_trial(
        self,
        parent_run_id: str,
        trial_id: str,
        layout: Layout,
        result: TrialResult,
        *,
        artifacts: list[Path] = (),
        extra_params: dict[str, Any] | None = None,
        started_at: float | None = None,
        ended_at: float | None = None,
    ) -> str:
        """The trial's run, from `started_at` to `ended_at` (epoch seconds; now if None)."""
        tags = {
            "mlflow.parentRunId": parent_run_id,
            "paratune.kind": "trial",
            "paratune.trial_id": trial_id,
            "paratune.status": result.status,
            "paratune.config_key": layout.key(),
        }
        if result.error:
            tags["paratune.error"] = result.error[:MAX_TAG_CHARS]
        # Named by layout too, short enough for the UI's name column (view.run_name).
        run = self.client.create_run(self.experiment_id, start_time=_ms(started_at),
                                     run_name=run_name(trial_id, layout.key()), tags=tags)
        run_id = run.info.run_id
        metrics = {name: result.metric(name) for name in METRIC_FIELDS}
        metrics.update({k: v for k, v in result.extra.items() if isinstance(v, (int, float))})
        self._log(
            run_id,
            params={**layout.to_params(), **(extra_params or {})},
            metrics={k: shown(k, v) for k, v in metrics.items() if v is not None},
            series={"step_time_s_series": [shown("step_time_s", v) for v in result.step_times_s]},
            timestamp_ms=_ms(ended_at),
        )
        for artifact in artifacts:
            self.client.log_artifact(run_id, str(artifact))
        self.client.set_terminated(run_id, status="FINISHED" if result.ok else "FAILED",
                                   end_time=_ms(ended_at))
        return run_id

    def _trial_run_objects(self) -> list:
        return self.client.search_runs(
            [self.experiment_id], filter_string="tags.`paratune.kind` = 'trial'", max_results=50000
        )

    def trial_runs(self) -> dict[str, tuple[str, bool]]:
        """trial_id -> (run_id, finished) for every trial run of this experiment."""
        return {r.data.tags.get("paratune.trial_id", ""): (r.info.run_id, r.info.status != "RUNNING")
                for r in self._trial_run_objects()}

    def finish_campaign(self, run_id: str, summary: dict[str, Any],
                        table: dict[str, list] | None = None, note: str | None = None,
                        pruned: dict[str, list] | None = None) -> None:
        """Close the campaign's run with its summary metrics, a table of every trial (shown
        in the run's Artifacts and the Evaluation view), one of the layouts pruned without
        running, and a description in the run's note."""
        metrics = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
        tags = {f"paratune.{k}": str(v) for k, v in summary.items() if isinstance(v, str)}
        if note:
            tags["mlflow.note.content"] = note
        self._log(run_id, metrics=metrics, tags=tags)
        if table:
            self._put_table(run_id, table, "campaign_summary.json")
        if pruned:
            self._put_table(run_id, pruned, "pruned_layouts.json")
        self.client.set_terminated(run_id, status="FINISHED")

    def _put_table(self, run_id: str, data: dict[str, list], artifact_file: str) -> None:
        """Log `data` as the run's table `artifact_file` (as `log_table` writes one), replacing
        the one a resumed campaign logged before, where `log_table` would download it and
        append: every trial twice."""
        import pandas as pd
        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / artifact_file
            pd.DataFrame(data).to_json(path, orient="split", index=False, date_format="iso")
            self.client.log_artifact(run_id, str(path))
        logged = json.loads(self.client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
        entry = {"path": artifact_file, "type": "table"}
        if entry not in logged:
            self.client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps([*logged, entry]))

    def _log(
        self,
        run_id: str,
        *,
        params: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        series: dict[str, list[float]] | None = None,
        tags: dict[str, str] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = timestamp_ms or int(time.time() * 1000)
        batch_metrics = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
        for key, values in (series or {}).items():
            batch_metrics += [Metric(key, float(v), now, step) for step, v in enumerate(values)]
        self.client.log_batch(
            run_id,
            metrics=batch_metrics,
            params=[Param(k, str(v)) for k, v in (params or {}).items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
        )
