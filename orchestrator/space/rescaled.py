"""A layout moved to another node count with each GPU's work kept: tp, pp, cp, ep, the
micro-batch and recompute stay, the data-parallel replicas scale with the nodes. The scaling
study re-runs its best layout so, and a slice campaign measures a target layout so on its
slice (fewer replicas) and confirms it at the target."""

from __future__ import annotations

import dataclasses

from orchestrator.space.config import Layout
from orchestrator.space.errors import InvalidConfig


def scaled_config(layout: Layout, base_nodes: int, nodes: int, study: str
                  ) -> Layout | None:
    """The layout at another node count: tp, pp and the micro-batch kept, dp scaled; weak
    scaling keeps each replica's micro-batches (the global batch grows with the nodes), strong
    scaling the global batch. None when the node count does not divide the layout (dp must
    stay whole, strong scaling needs at least one micro-batch per replica) or the layout is not
    valid there (an expert group wider than the replicas)."""
    if (layout.dp * nodes) % base_nodes:
        return None
    dp = layout.dp * nodes // base_nodes
    if dp < 1:
        return None
    gas = layout.grad_accum_steps
    if study == "strong":
        total = layout.global_batch_size()
        per_micro_batch = dataclasses.replace(layout.dims, dp=dp).samples_per_micro_batch(
            layout.micro_batch_size)
        if total % per_micro_batch:
            return None
        gas = total // per_micro_batch
    sharding = layout.sharding
    if sharding is not None and nodes != base_nodes:
        sharding = None  # AMSP factors belong to one mesh; the scaled run uses the ZeRO stage
    try:
        return dataclasses.replace(layout, dp=dp, grad_accum_steps=gas, sharding=sharding)
    except (InvalidConfig, ValueError):
        return None
