"""Warm start: seed a campaign with another campaign's results from MLflow.

The source may be the same model at another scale or a neighbouring model. Its results do not
transfer as numbers (another world size, another model), so they go through the cost model:
the source's trials calibrate the source's model, and the fitted coefficients (compute
efficiency, communication exposure, fixed costs) become this campaign's starting model. What
the model still got wrong on the source, log(measured / predicted) of the objective's gain per
layout, is handed to the searcher as prior residuals on the knobs both spaces share.
"""

from __future__ import annotations

import math

from orchestrator.costmodel import CostModel, calibrate, cost_model_for
from orchestrator.errors import CampaignStateError
from orchestrator.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search_spaces import ParallelConfig
from orchestrator.spec import CampaignSpec, load_campaign_spec
from orchestrator.tracking import Tracker


def source_results(spec: CampaignSpec, source: str) -> list[tuple[str, ParallelConfig, TrialResult]]:
    """The source campaign's full-fidelity trials that ran, read back from MLflow."""
    tracker = Tracker(spec.tracking_uri(), f"paratune/{source}")
    found = []
    for params, metrics, tags in tracker.trials():
        if params.get("fidelity", "full") != "full":
            continue
        status = tags.get("paratune.status", "failed")
        if status == "infeasible":
            continue  # pruned without running (earlier campaigns logged those as runs too)
        result = TrialResult.from_dict({"status": status, **metrics})
        found.append((tags.get("paratune.trial_id", ""), ParallelConfig.from_params(params), result))
    return found


def warm_start(spec: CampaignSpec, source: str, base: CostModel):
    """(the calibrated starting model, prior residuals [(config, log residual)])."""
    source_spec = load_campaign_spec(spec.runs_dir(), source)
    measured = source_results(spec, source)
    fit = calibrate(cost_model_for(source_spec), measured)
    if fit is None:
        raise CampaignStateError(
            f"search.warm_start: campaign {source!r} has fewer than 3 successful trials in MLflow "
            f"at {spec.tracking_uri()}; run it further or drop warm_start"
        )
    model = base.with_coefficients(fit.model.coefficients)
    objective = Objective.of(spec.objective)
    prior = []
    for _, config, result in measured:
        gain = objective.result_gain(result)
        expected = objective.gain(objective.predicted(fit.model.estimate(config)))
        if gain and expected:
            prior.append((config, math.log(gain / expected)))
    return model, prior
