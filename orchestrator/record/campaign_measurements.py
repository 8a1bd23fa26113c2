"""Another campaign's measured trials as calibration rows (`paratune calibrate --from`): its
journal says what each trial measured, and the spec saved beside it what the layouts ran on
(model, cluster, trainer); a journal alone names neither.

Every trial at the tuned scale that ended ok with a step time is a row; the others are
counted by why they are not (how the trial ended, or a scaling study's other scale).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

from orchestrator.common.errors import UserError
from orchestrator.costmodel.cluster_fit import Measurement, calibrated_coefficients
from orchestrator.presets import Cluster
from orchestrator.record.campaign import JOURNAL_FILE, CampaignView, calibration_input
from orchestrator.record.journal import SCALING
from orchestrator.campaign_spec.loading import SPEC_FILE
from orchestrator.campaign_spec.planning import cost_model_for


def campaign_folder(path: Path) -> Path:
    """The campaign folder a `--from` path names: the folder itself or its journal."""
    folder = path if path.is_dir() else path.parent
    if not path.is_dir() and path.name != JOURNAL_FILE:
        raise UserError(f"--from {path}: not a campaign's journal (runs/NAME/{JOURNAL_FILE}) "
                        "nor a .csv; give one of those, or the campaign's folder")
    if not (folder / SPEC_FILE).is_file():
        raise UserError(f"--from {path}: no {SPEC_FILE} in {folder}, which says the model and "
                        "cluster the journal's trials ran on; give the journal in its "
                        "campaign folder as `paratune run` left it")
    return folder


def journal_measurements(path: Path, cluster: Cluster | None = None
                         ) -> tuple[CampaignView, list[Measurement], Counter]:
    """The campaign at `path`, its trials as rows priced by its spec's model (on `cluster`
    instead of the spec's, if given), and the trials that are not rows, counted by reason."""
    folder = campaign_folder(path)
    view = CampaignView.open(folder.parent, folder.name)
    cost = cost_model_for(view.spec)
    if cluster is not None:
        cost = replace(cost, cluster=cluster, coefficients=calibrated_coefficients(cluster))
    landscape = f"{view.spec.model.name} on {view.spec.world_size} x {cost.cluster.name}"
    records = view.records()
    unpriced: Counter = Counter()
    for record in records:
        if record.result is None:
            unpriced["no result yet (running or cut short)"] += 1
        elif record.phase == SCALING:
            unpriced["another scale (a scaling study's trial)"] += 1
    rows = []
    for trial_id, config, result in calibration_input(records):
        if not result.ok:
            unpriced[f"ended {result.status}"] += 1
        elif not result.step_time_s or not math.isfinite(result.step_time_s):
            unpriced["no step time measured"] += 1
        else:
            rows.append(Measurement(trial_id, landscape, cost, config, result.step_time_s))
    return view, rows, unpriced
