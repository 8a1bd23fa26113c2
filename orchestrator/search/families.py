"""Families of layouts (one tp x pp x cp x ep combination) and the one the cost model's error
on real measurements says could still win: measured before a search stops. Also the regimes
(tp, pp and sharding) a search's first picks spread over.

A search stops once no untried layout's upper bound reaches the best measured one. That bound
is the residual model's, and it narrows as the campaign's measurements agree with the model,
while the model's error about a layout it has not seen does not. On the published measurements
the stock model is wrong about one layout against the others of its landscape by up to
MODEL_ERROR (log of predicted over measured step time, less the landscape's mean; its 90th
percentile over 119 layouts of 55 check landscapes: docs/validation.json `within_landscape`,
benchmarks/validate_costmodel.py). So a family no successful measurement has touched, whose
best layout is expected within that factor of the best measured one, could still win, and it is
measured before the search says nothing is left: one layout per family, its best.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from orchestrator.space import Layout

MODEL_ERROR = 0.2143  # docs/validation.json within_landscape.p90_abs (a test keeps them equal)


def family(layout: Layout) -> tuple[int, int, int, int]:
    return layout.tp, layout.pp, layout.cp, layout.ep


def regime(layout: Layout) -> tuple:
    """What the first picks spread over, so the calibration sees different regimes."""
    return layout.tp, layout.pp, layout.zero_stage, layout.sharding


def family_left_to_measure(untried: Sequence[Layout], expected: Sequence[float],
                           ran: Collection[Layout], bar: float) -> Layout | None:
    """The untried layout of highest `expected` gain (its chance to run included) in a family
    `ran` does not touch, whose gain times exp(MODEL_ERROR) reaches `bar`; None if none."""
    touched = {family(c) for c in ran}
    reach = math.exp(MODEL_ERROR)
    left = [(gain, config) for config, gain in zip(untried, expected)
            if family(config) not in touched and gain * reach >= bar]
    return max(left, key=lambda pair: pair[0])[1] if left else None
