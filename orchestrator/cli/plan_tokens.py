"""What `paratune plan` says under its table about the pick: the largest micro-batch that fits
with its other knobs, and with `--tokens N` how long the token budget takes on each listed
layout and what it costs in GPU-hours, from the cost model's tokens per second (days = tokens
/ tokens_per_s / 86,400; GPU-hours = world size x hours)."""

from __future__ import annotations

import dataclasses
import re

from orchestrator.cli.common import out
from orchestrator.cli.layout_table import best_first
from orchestrator.cli.plan_slice import print_slice_plan, slice_plan
from orchestrator.common.errors import UserError
from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel
from orchestrator.costmodel.estimate import Estimate
from orchestrator.costmodel.ranking import Ranking
from orchestrator.campaign_spec import CampaignSpec

_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_TOKENS = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*")


def parse_tokens(text: str) -> float:
    """A token count: 15T, 300B, 2.5e12, 1000000."""
    found = _TOKENS.fullmatch(text.replace(",", "").replace("_", ""))
    value = float(found[1]) * _SUFFIX[found[2].upper()] if found else 0.0
    if not 1 <= value <= 1e18:
        raise UserError(f"--tokens: {text!r} is not a token count; e.g. 15T, 300B or 1e12")
    return value


def time_to_train(tokens: float, tokens_per_s: float, world_size: int) -> dict:
    """Days and GPU-hours to train on `tokens` at `tokens_per_s` on `world_size` GPUs."""
    hours = tokens / tokens_per_s / 3600
    return {"days": hours / 24, "gpu_hours": hours * world_size}


def tokens_text(tokens: float) -> str:
    """15T, 300B, 2.5M: the form --tokens takes."""
    for suffix in "TBM":
        if tokens >= _SUFFIX[suffix]:
            return f"{tokens / _SUFFIX[suffix]:.4g}{suffix}"
    return f"{tokens:,.0f}"


def print_time_to_train(tokens: float, rows: list[dict]) -> None:
    """One line per listed layout, in the table's order."""
    out.print(f"time to train on {tokens_text(tokens)} tokens:", markup=False, highlight=False)
    for number, row in enumerate(rows, 1):
        out.print(f"  #{number}: {row['days']:,.1f} days, {row['gpu_hours']:,.0f} GPU-hours",
                  markup=False, highlight=False)


def largest_micro_batch(cost: CostModel, best: Estimate, global_batch_size: int) -> int:
    """The largest micro-batch that fits with the pick's other knobs (the batch permitting)."""
    config, largest = best.config, best.config.micro_batch_size
    size = largest * 2
    while global_batch_size % config.dims.samples_per_micro_batch(size) == 0:
        steps = global_batch_size // config.dims.samples_per_micro_batch(size)
        bigger = dataclasses.replace(config, micro_batch_size=size, grad_accum_steps=steps)
        if not cost.estimate(bigger).fits:
            break
        largest, size = size, size * 2
    return largest


def pick_extras(spec: CampaignSpec, cost: CostModel, ranking: Ranking,
                tokens: float | None) -> dict:
    """plan's JSON fields on the pick: `largest_micro_batch` (None: nothing fits), a slice
    campaign's `slice` (plan_slice.py; None for the others), and with a
    token budget `tokens` and `time_to_train`, one entry per listed layout in the table's
    order."""
    best = ranking.best
    found = {"largest_micro_batch": best and largest_micro_batch(
        cost, best, spec.scale.global_batch_size)}
    found["slice"] = slice_plan(spec, cost, [e.config for e in ranking.top])
    if tokens:
        objective = Objective.of(spec.objective)
        listed = best_first(objective, ranking.top, objective.predicted)
        found.update(tokens=tokens, time_to_train=[
            time_to_train(tokens, e.tokens_per_s, spec.world_size) for e in listed])
    return found


def print_pick_extras(ranking: Ranking, extras: dict) -> None:
    largest = extras["largest_micro_batch"]
    if largest is not None and largest > ranking.best.config.micro_batch_size:
        out.print(f"the largest micro-batch that fits with the pick's other knobs: {largest} "
                  "(the cost model prices the pick's own as faster)",
                  markup=False, highlight=False)
    if "tokens" in extras:
        print_time_to_train(extras["tokens"], extras["time_to_train"])
    print_slice_plan(extras["slice"])
