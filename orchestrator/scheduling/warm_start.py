"""Warm start: seed a campaign with another campaign's results, read from its journal (the
record; its MLflow mirror may be behind, or lost).

The source may be the same model at another scale or a neighbouring model. Its results do not
transfer as numbers (another world size, another model), so they go through the cost model:
the source's trials calibrate the source's model, and the fitted coefficients (compute
efficiency, communication exposure, fixed costs) become this campaign's starting model. A
source on fewer GPUs is a slice of this campaign's cluster: its trials set what a rank does
with its model-parallel peers and leave the data-parallel collectives, which grow with the
nodes they span, to the model (`calibrate_from_slice`), as a slice campaign's do. What
the model still got wrong on the source, log(measured / predicted) of the objective's gain per
layout, is handed to the searcher as prior residuals on the knobs both spaces share.
"""

from __future__ import annotations

import math

from orchestrator.common.errors import CampaignStateError
from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel, calibrate
from orchestrator.costmodel.calibration import calibrate_from_slice
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import CONFIRM, REPEAT, SEARCH
from orchestrator.result import TrialResult
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.planning import cost_model_for


def source_results(view: CampaignView) -> list[tuple[str, Layout, TrialResult]]:
    """The source campaign's full-fidelity trials at its own scale that ran (not the ones
    pruned as infeasible, the screens or a scaling study's other scales)."""
    return [(r.trial_id, r.config, r.result) for r in view.records()
            if r.result is not None and r.result.status != "infeasible"
            and r.phase in (SEARCH, CONFIRM, REPEAT)]


def warm_start(spec: CampaignSpec, source: str, base: CostModel):
    """(the calibrated starting model, prior residuals [(config, log residual)])."""
    view = CampaignView.open(spec.runs_dir(), source)
    measured = source_results(view)
    source_cost = cost_model_for(view.spec)
    smaller = view.spec.world_size < spec.world_size
    fit = (calibrate_from_slice if smaller and len(measured) >= 3 else calibrate)(
        source_cost, measured)
    if fit is None:
        raise CampaignStateError(
            f"search.warm_start: campaign {source!r} has fewer than 3 successful trials in "
            f"its journal ({view.journal.path}); run it further or drop warm_start"
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
