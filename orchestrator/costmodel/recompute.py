"""Partial recompute: the fewest layers per stage that must replay their forward to fit.

Full recompute keeps only each layer's input and replays every forward, a third more compute
than the step needs when memory is left over. InternEvo (AMSP's code base) recomputes a
fraction of the layers (`model.checkpoint`) and Megatron-LM the first `--recompute-num-layers`
of each stage (`--recompute-method block`); the fewest that fit cost the least compute. Memory
falls as more layers recompute, so a bisection over the count finds it. A space that lists
`recompute_num_layers: fit` gets that count per layout (campaign_spec/planning.py), resolved once by the
model at its stock constants: a campaign's measured memory ratio does not re-resolve it.
"""

from __future__ import annotations

import dataclasses

from orchestrator.costmodel.estimate import CostModel
from orchestrator.space import Layout


def fewest_recomputed_layers(cost: CostModel, layout: Layout) -> Layout:
    """`config` with the fewest recomputed layers per stage that fit (no recompute if that
    fits); `config` itself unless it recomputes every layer or nothing less fits."""
    if layout.activation_checkpointing != "full" or layout.recompute_num_layers is not None:
        return layout

    without = dataclasses.replace(layout, activation_checkpointing="none")
    if cost.fits(without):
        return without
    chunk = layout.busiest_chunk_layers(cost.model.num_layers)
    low, high = 1, chunk - 1  # the answer, if any, is in [low, high]
    if high < low or not cost.fits(dataclasses.replace(layout, recompute_num_layers=high)):
        return layout
    while low < high:
        middle = (low + high) // 2
        if cost.fits(dataclasses.replace(layout, recompute_num_layers=middle)):
            high = middle
        else:
            low = middle + 1
    return dataclasses.replace(layout, recompute_num_layers=low)

