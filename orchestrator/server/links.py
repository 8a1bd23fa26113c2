"""Where a campaign's trials can be browsed in MLflow: the tracking server itself when the
campaign tracks to one, else the MLflow UI the service was told of (`--mlflow-ui`, e.g. a
`paratune ui` over the service's runs directory). An experiment's id never changes, so it is
looked up once per campaign."""

from __future__ import annotations

import threading
import time

from orchestrator.tracking.view import trials_link

RETRY_S = 30.0


class MlflowLinks:
    def __init__(self, ui_base: str | None):
        self.ui_base = ui_base
        self._ids: dict[str, str] = {}
        self._missed: dict[str, float] = {}  # not there yet: asked again after RETRY_S
        self._lock = threading.Lock()

    def link(self, tracking_uri: str | None, experiment: str | None) -> str | None:
        if not tracking_uri or not experiment:
            return None
        base = tracking_uri if tracking_uri.startswith(("http://", "https://")) else self.ui_base
        if base is None:
            return None
        experiment_id = self._experiment_id(tracking_uri, experiment)
        return None if experiment_id is None else trials_link(base, experiment_id)

    def _experiment_id(self, uri: str, experiment: str) -> str | None:
        with self._lock:
            if experiment in self._ids:
                return self._ids[experiment]
            if time.monotonic() - self._missed.get(experiment, -RETRY_S) < RETRY_S:
                return None
        from mlflow.tracking import MlflowClient  # heavy: only when a link is asked for

        try:
            found = MlflowClient(tracking_uri=uri).get_experiment_by_name(experiment)
        except Exception:  # MLflow away: no link this time
            found = None
        if found is None:
            with self._lock:
                self._missed[experiment] = time.monotonic()
            return None
        with self._lock:
            self._ids[experiment] = found.experiment_id
        return found.experiment_id
