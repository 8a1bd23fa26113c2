"""A slice campaign's two scales: `scale.nodes` is the target it chooses a layout for, and its
search trials run on `scale.slice_nodes` nodes with the same work per GPU, so the global batch
shrinks with the replicas (sections.py checks that it divides)."""

from __future__ import annotations

from orchestrator.campaign_spec.campaign import CampaignSpec


def slices_in_target(spec: CampaignSpec) -> int:
    """How many slices make the target (1 for a campaign that runs at its target)."""
    return spec.scale.nodes // (spec.scale.slice_nodes or spec.scale.nodes)


def slice_spec(spec: CampaignSpec) -> CampaignSpec:
    """The spec the search runs under: the slice's nodes and its share of the global batch;
    the spec itself where there is no slice."""
    if spec.scale.slice_nodes is None:
        return spec
    scale = spec.scale.model_copy(update={
        "nodes": spec.scale.slice_nodes, "slice_nodes": None,
        "global_batch_size": spec.scale.global_batch_size // slices_in_target(spec)})
    return spec.model_copy(update={"scale": scale})


def trials_at_once(spec: CampaignSpec) -> int:
    """`budget.max_concurrent`, and for a slice campaign no more slices than its target holds,
    so the campaign can run inside the production allocation."""
    limit = spec.budget.max_concurrent
    return limit if spec.scale.slice_nodes is None else min(limit, slices_in_target(spec))
