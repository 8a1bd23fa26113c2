"""A warm start from a campaign on fewer GPUs treats it as a slice of this campaign's cluster:
its trials set the rank's own work and leave the data-parallel collectives, which grow with
the nodes they span, to the model; a source of the same size calibrates every term."""

from __future__ import annotations

from builders import frontier_campaign

from orchestrator.campaign_spec.planning import cost_model_for

SEEDED = ("backend.noise=0.05", "backend.seed=3", "search.seed=3")


def _source(runs, *sets):
    from orchestrator.scheduling.controller import Controller
    Controller(frontier_campaign(runs, "source", *SEEDED, "budget.max_trials=8", *sets)).run()


def test_a_smaller_source_leaves_the_data_parallel_terms_to_the_model(tmp_path):
    from orchestrator.scheduling.warm_start import warm_start
    runs = tmp_path / "runs"
    _source(runs, "scale.nodes=16", "scale.global_batch_size=192")
    target = frontier_campaign(runs, "target", *SEEDED, "search.warm_start=source")
    base = cost_model_for(target)
    model, prior = warm_start(target, "source", base)
    c, stock = model.coefficients, base.coefficients
    assert prior
    assert (c.dp_exposure, c.dp_exposure_gathers, c.scale_data_parallel_comm) == (
        stock.dp_exposure, stock.dp_exposure_gathers, stock.scale_data_parallel_comm)
    assert c.scale_compute != stock.scale_compute
    assert c.scale_compute / stock.scale_compute == c.scale_bubble / stock.scale_bubble


def test_a_source_of_the_same_size_calibrates_as_its_own_campaign_would(tmp_path):
    from orchestrator.costmodel import calibrate
    from orchestrator.record.campaign import CampaignView
    from orchestrator.scheduling.warm_start import source_results, warm_start
    runs = tmp_path / "runs"
    _source(runs)
    target = frontier_campaign(runs, "target", *SEEDED, "search.warm_start=source")
    model, _ = warm_start(target, "source", cost_model_for(target))
    view = CampaignView.open(runs, "source")
    own = calibrate(cost_model_for(view.spec), source_results(view))
    assert model.coefficients == own.model.coefficients
