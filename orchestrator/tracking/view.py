"""How a campaign's experiment opens in the MLflow UI: the experiment kind, a saved view of the
trial table (every trial in its own row, sorted by the objective, metric and layout columns
shown) and the link that opens it. Pure: tag values and URLs, no MLflow calls.

Checked against the UI bundled with MLflow 3.17.2 (mlflow/server/js/build/static/js):
- `mlflow.experimentKind` = `custom_model_development` is the value the UI writes itself
  (chunk 2809: `setExperimentTag({experiment_id, key: "mlflow.experimentKind", value})`, values
  in main.js: `CUSTOM_MODEL_DEVELOPMENT = "custom_model_development"`). 3.17's sidebar reads the
  kind from its GenAI / Model training switch before the tag, so the link also carries
  `workflowType=machine_learning`, the URL parameter that sets that switch.
- `viewStateShareKey=KEY` loads the experiment tag `mlflow.sharedViewState.KEY` (JSON), as the
  UI's own "share view" does: its search facets (`searchFilter`, `orderByKey`, `orderByAsc`)
  and table state (`selectedColumns`, `columnOrder`). A search filter or a sort other than by
  date lists child runs flat instead of collapsed under their parent; `selectedColumns` holds
  keys like ``metrics.`tokens_per_s` ``. The view travels with the store, so the link shows the
  same table in a browser that opened the experiment before.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from orchestrator.common.objective import Objective

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # MLflow's "Machine learning" (training runs)
VIEW_KEY = "paratune-trials"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
TRIAL_FILTER = "tags.`paratune.kind` = 'trial'"
# Shown after the objective, in this order (a metric a trial lacks shows as empty).
METRICS = ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s",
           "peak_memory_gb")
PARAMS = ("tp", "pp", "dp", "zero_stage", "micro_batch_size", "activation_checkpointing",
          "fidelity")
TAGS = ("paratune.status",)


def column(group: str, name: str) -> str:
    """The UI's key for a column: ``metrics.`mfu` ``, ``params.`tp` ``, ``tags.`x` ``."""
    return f"{group}.`{name}`"


def trials_view(objective: Objective) -> dict:
    """The saved view: trials only, best first by the objective, their metrics and layout."""
    metrics = [objective.metric] + [m for m in METRICS if m != objective.metric]
    columns = ([column("metrics", m) for m in metrics] + [column("params", p) for p in PARAMS]
               + [column("tags", t) for t in TAGS])
    return {
        "searchFilter": TRIAL_FILTER,
        "orderByKey": column("metrics", objective.metric),
        "orderByAsc": not objective.maximise,
        "selectedColumns": columns,
        "columnOrder": ["duration"] + columns,  # the Duration column's id is its field
    }


def experiment_tags(objective: Objective | None) -> dict[str, str]:
    """Tags every campaign experiment carries: its kind and, given the objective, the view."""
    tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
    if objective is not None:
        tags[VIEW_TAG] = json.dumps(trials_view(objective))
    return tags


def trials_link(server: str, experiment_id: str, *, view: bool = True) -> str:
    """The URL of the experiment's runs table on `server` (e.g. http://127.0.0.1:5000), opened
    on the saved trial view, or on the plain training-runs table with `view=False`."""
    query = {"viewStateShareKey": VIEW_KEY} if view else {}
    query["workflowType"] = "machine_learning"
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?{urlencode(query)}"
