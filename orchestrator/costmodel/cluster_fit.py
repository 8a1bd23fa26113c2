"""One cluster's calibration, fitted to measurements of one or several models on it: the
multipliers its preset file carries (presets/cluster_calibration.py), and what they predict.

The multipliers are the cluster's (how its kernels, links and software compare with the
analytic model), so every measured row of the cluster fits them together: each row's
step-time terms come from its own model (shape, trainer, node size) and all rows make one
least-squares problem (calibration.fit_terms). With fewer rows than twice the terms present,
one scale on the whole prediction (calibration.scaled), which keeps each model's ranking.
`held_out_predictions` predicts each row from a fit on all the others.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields

from orchestrator.costmodel.calibration import (
    MIN_TRIALS,
    feature_model,
    features,
    fit_terms,
    scaled,
    with_terms,
)
from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.estimate import CostModel, Estimate
from orchestrator.presets import Cluster
from orchestrator.presets.cluster_calibration import ClusterCalibration
from orchestrator.space import Layout


@dataclass(frozen=True)
class Measurement:
    """One measured layout: a campaign's trial or a published row."""

    label: str  # where it came from: a trial id, "FILE row N"
    landscape: str  # one model on one cluster, the rows a ranking compares
    cost: CostModel  # the row's own model, before this fit
    config: Layout
    step_time_s: float

    @property
    def tokens_per_gpu_step(self) -> float:
        """Tokens one GPU's share of a step trains: throughput per GPU times the step time,
        comparable between the layouts of a landscape at different GPU counts."""
        return self.config.global_batch_size() * self.cost.model.seq_len / self.config.world_size


@dataclass(frozen=True)
class ClusterFit:
    coefficients: Coefficients
    terms: dict[str, float]  # calibration.FEATURES' multipliers; empty for a global scale
    global_scale: float | None = None  # set when too few rows to fit every term


def calibrated_coefficients(cluster: Cluster, base: Coefficients | None = None
                            ) -> Coefficients:
    """The coefficients a cluster's preset gives the model: `base` (the defaults) with the
    multipliers its calibration holds, if it holds one."""
    base = base or Coefficients()
    if cluster.calibration is None:
        return base
    held = cluster.calibration.model_dump(exclude={"fitted_on"})
    return base.with_(**held)


def calibration_of(coefficients: Coefficients, fitted_on: str) -> ClusterCalibration:
    """What a preset file keeps of a fit: the multipliers (presets/cluster_calibration.py)."""
    names = {f.name for f in fields(Coefficients)} & set(ClusterCalibration.model_fields)
    return ClusterCalibration(fitted_on=fitted_on,
                              **{name: getattr(coefficients, name) for name in names})


def fit_cluster(rows: list[Measurement], feature_rows: list[list[float]] | None = None
                ) -> ClusterFit | None:
    """The multipliers every row of one cluster fits best; None with fewer than MIN_TRIALS
    rows. The rows' own coefficients (the same for all: stock, or a preset's calibration) are
    the base the multipliers replace."""
    if len(rows) < MIN_TRIALS:
        return None
    x = feature_rows or [features(feature_model(r.cost), r.config) for r in rows]
    base = rows[0].cost.coefficients
    terms = fit_terms(x, [r.step_time_s for r in rows])
    if terms is not None:
        return ClusterFit(with_terms(base, terms), terms)
    scale = statistics.median(r.step_time_s / r.cost.estimate(r.config).step_time_s
                              for r in rows)
    return ClusterFit(scaled(base, scale), {}, global_scale=scale)


def predictions(rows: list[Measurement], coefficients: Coefficients | None = None
                ) -> list[Estimate]:
    """Each row's estimate by its own model, or with `coefficients`."""
    return [(r.cost if coefficients is None else r.cost.with_coefficients(coefficients))
            .estimate(r.config) for r in rows]


def held_out_predictions(rows: list[Measurement]) -> list[Estimate] | None:
    """Each row's estimate by the fit on all the other rows: the error on a layout the fit
    has not measured (calibration.held_out_errors, for rows of several models); None while
    one row left out leaves too few to fit."""
    if len(rows) <= MIN_TRIALS:
        return None
    x = [features(feature_model(r.cost), r.config) for r in rows]
    found = []
    for i, row in enumerate(rows):
        fit = fit_cluster(rows[:i] + rows[i + 1:], x[:i] + x[i + 1:])
        found += predictions([row], fit.coefficients)
    return found
