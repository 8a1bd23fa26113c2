"""How a campaign's experiment opens in the MLflow UI: the experiment kind, a saved view of the
trial table (every trial in its own row, sorted by the objective, then the knobs the campaign
varies, then the other metrics), readable run names and the link that opens it. Pure: tag
values, names and URLs, no MLflow calls.

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
import re
from typing import Any
from urllib.parse import urlencode

from orchestrator.common.objective import Objective

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # MLflow's "Machine learning" (training runs)
VIEW_KEY = "paratune-trials"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
TRIAL_FILTER = "tags.`paratune.kind` = 'trial'"
# Shown after the objective and the knobs, in this order (a metric a trial lacks shows empty).
METRICS = ("tokens_per_s", "mfu", "step_time_s", "peak_memory_gb", "tokens_per_s_per_gpu",
           "tflops_per_gpu")
# The knob columns until the campaign's trials say which knobs it varies.
KNOBS = ("tp", "pp", "dp", "zero_stage", "micro_batch_size", "activation_checkpointing")
PARAMS = ("fidelity",)  # after the metrics
TAGS = ("paratune.status",)
# Key parts a run name leaves out: dp and grad_accum_steps follow from the others, and the
# defaults (tp 1, pp 1, no ZeRO, no recompute) go without saying. What is left fits the UI's
# Run Name column (about 20 characters) for most layouts.
IMPLIED_PARTS = re.compile(r"(?:^|-)(?:dp\d+|gas\d+|tp1|pp1|z0|acnone)(?=-|$)")


def column(group: str, name: str) -> str:
    """The UI's key for a column: ``metrics.`mfu` ``, ``params.`tp` ``, ``tags.`x` ``."""
    return f"{group}.`{name}`"


def run_name(trial_id: str, key: str) -> str:
    """A trial run's name, short enough for the UI's name column: `t0007 tp2 pp4 z1 mb2`
    from trial t0007 and layout key `tp2-pp4-dp1-z1-mbs2-gas1-acnone`, `t0003 z1 mb4` from
    `tp1-pp1-dp2-z1-mbs4-gas1-acnone`."""
    short = IMPLIED_PARTS.sub("", key).lstrip("-")
    short = re.sub(r"(?:^|(?<=-))mbs(?=\d)", "mb", short)
    return f"{trial_id} {short.replace('-', ' ')}".strip()


def varying_knobs(layouts: list[dict[str, Any]]) -> list[str]:
    """The fields whose value differs between `layouts` (flat params), in their order."""
    names: list[str] = []
    for layout in layouts:
        names += [k for k in layout if k not in names]
    return [k for k in names if len({repr(layout.get(k)) for layout in layouts}) > 1]


def view_knobs(view_json: str) -> list[str] | None:
    """The knob columns of a saved view (None when it cannot be read)."""
    try:
        columns = json.loads(view_json)["selectedColumns"]
    except (ValueError, KeyError, TypeError):
        return None
    params = [c[len("params.`"):-1] for c in columns if str(c).startswith("params.`")]
    return [p for p in params if p not in PARAMS]


def trials_view(objective: Objective, knobs: list[str] | tuple[str, ...] = KNOBS) -> dict:
    """The saved view: trials only, best first by the objective, then the knobs, metrics."""
    metrics = [m for m in METRICS if m != objective.metric]
    columns = ([column("metrics", objective.metric)] + [column("params", k) for k in knobs]
               + [column("metrics", m) for m in metrics]
               + [column("params", p) for p in PARAMS] + [column("tags", t) for t in TAGS])
    return {
        "searchFilter": TRIAL_FILTER,
        "orderByKey": column("metrics", objective.metric),
        "orderByAsc": not objective.maximise,
        "selectedColumns": columns,
        "columnOrder": ["duration"] + columns,  # the Duration column's id is its field
    }


def experiment_tags(objective: Objective | None,
                    knobs: list[str] | tuple[str, ...] | None = None) -> dict[str, str]:
    """Tags every campaign experiment carries: its kind and, given the objective, the view
    (with `knobs` as its knob columns; KNOBS when None)."""
    tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
    if objective is not None:
        tags[VIEW_TAG] = json.dumps(trials_view(objective, KNOBS if knobs is None else knobs))
    return tags


def trials_link(server: str, experiment_id: str, *, view: bool = True) -> str:
    """The URL of the experiment's runs table on `server` (e.g. http://127.0.0.1:5000), opened
    on the saved trial view, or on the plain training-runs table with `view=False`."""
    query = {"viewStateShareKey": VIEW_KEY} if view else {}
    query["workflowType"] = "machine_learning"
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?{urlencode(query)}"
