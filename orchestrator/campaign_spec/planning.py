"""A campaign spec's own cost model and candidates: the glue between a whole spec and the pure
stages (the cost model and the search space take plain shapes, never a spec)."""

from __future__ import annotations

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.cluster_fit import calibrated_coefficients
from orchestrator.costmodel.recompute import fewest_recomputed_layers
from orchestrator.space import Layout
from orchestrator.campaign_spec.campaign import CampaignSpec


def cost_model_for(spec: CampaignSpec) -> CostModel:
    """The default cost model of a campaign spec, for the trainer its trials run, with the
    multipliers its cluster preset holds if `paratune calibrate --from` fitted them."""
    from orchestrator.trainers.registry import trainer_for  # the adapters read the spec

    return CostModel(spec.model, spec.cluster, spec.gpus_per_node, spec.trial.flash_attention,
                     coefficients=calibrated_coefficients(spec.cluster),
                     runtime=trainer_for(spec).runtime_for(spec))


def priced_runtime(spec: CampaignSpec) -> str:
    """Which runtime the cost model prices the campaign's trials as, and which key said so:
    what `plan` and the report name, since a command program's is an assumption."""
    from orchestrator.trainers.registry import trainer_for

    return trainer_for(spec).priced_as(spec)


def fitted_candidates(spec: CampaignSpec, cost: CostModel | None = None) -> list[Layout]:
    """A campaign spec's layouts, each `recompute_num_layers: fit` resolved by `cost` (the
    spec's default cost model if none is given)."""
    cost = cost or cost_model_for(spec)
    return spec.candidates(fit=lambda layout: fewest_recomputed_layers(cost, layout))
