"""Hidden quirks of the simulated backend on expert, context and interleaved pipeline
parallelism: where a generated MoE or long-context landscape departs from the cost model on
ep, etp, cp, cp_comm_type and virtual_stages themselves.

Each is a function of a config's settings and a few hidden parameters drawn once per seed
(`HiddenParameters.draw`), not one factor per knob value:

- `expert_dispatch`, a threshold that grows with scale: the expert all-to-all stays fast while
  its group (ep times the expert tensor-parallel size) is within a hidden span of 8 or 16
  ranks; past it, each doubling costs 6-14%, more on larger clusters (log2 of the world size
  over 10).
- `context_exchange`, cp, its exchange and tp together: a p2p ring hides its transfers while
  cp x tp stays in one node of 8 and loses 4-10% per doubling past it, half of that with full
  recomputation (more compute to hide behind); all-to-all is fast up to a hidden cp x tp of 4
  or 8 and costs 5-12% per doubling over it; all-gather pays 3-8% times
  log2(cp) x (cp - 1) / cp. At most half the throughput is lost.
- `interleave`: virtual stages add point-to-point sends and launches that the bubble saving
  hides only with enough micro-batches: 1.5-4% times log2 of the stages per rank times the
  square root of pp over the micro-batches per replica (grad_accum_steps), at most 30%.

Each is zero where its knobs sit at their defaults (no ep, cp or interleaving). The formulas
take numpy arrays of parameters as well as numbers, so a benchmark's reference search that is
told this structure (benchmarks/structure_oracle.py) can weigh many draws of the parameters at
once; the searchers a campaign uses never import backends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np

from orchestrator.backends.quirks import rng
from orchestrator.layout import ParallelDims

PARALLEL_QUIRKS = ("expert_dispatch", "context_exchange", "interleave")
NODE = 8  # ranks in one fast domain, the hidden truth's (the searchers are not told)


@dataclass(frozen=True)
class HiddenParameters:
    """The parameters the quirks' sizes depend on: numbers for one seed's truth, or arrays of
    draws from the same prior."""

    dispatch_span: Any
    dispatch_rate: Any
    p2p_rate: Any
    a2a_fast_up_to: Any
    a2a_rate: Any
    allgather_rate: Any
    interleave_rate: Any

    @classmethod
    def _from(cls, stream: Callable[..., random.Random]) -> "HiddenParameters":
        dispatch, a2a = stream("expert_dispatch"), stream("context_exchange", "a2a")
        return cls(
            dispatch_span=dispatch.choice((8, 16)), dispatch_rate=dispatch.uniform(0.06, 0.14),
            p2p_rate=stream("context_exchange", "p2p").uniform(0.04, 0.10),
            a2a_fast_up_to=a2a.choice((4, 8)), a2a_rate=a2a.uniform(0.05, 0.12),
            allgather_rate=stream("context_exchange", "allgather").uniform(0.03, 0.08),
            interleave_rate=stream("interleave").uniform(0.015, 0.04))

    @classmethod
    def draw(cls, seed: int) -> "HiddenParameters":
        """One seed's parameters: the truth of that seed's landscape."""
        return cls._from(lambda *part: rng(seed, *part))

    @classmethod
    def prior(cls, count: int, seed: int) -> "HiddenParameters":
        """`count` independent draws from the prior the truths are drawn from, as arrays."""
        draws = [cls._from(lambda *part, r=random.Random(f"{seed}:{i}"): r)
                 for i in range(count)]
        return cls(**{f.name: np.array([getattr(d, f.name) for d in draws])
                      for f in fields(cls)})


def _world(settings: dict[str, Any]) -> int:
    return ParallelDims.of(settings).world


def expert_dispatch(hidden: HiddenParameters, settings: dict[str, Any]):
    group = settings.get("ep", 1) * (settings.get("etp") or 1)
    doublings = np.maximum(0.0, np.log2(group / np.asarray(hidden.dispatch_span, float)))
    scale = np.log2(max(_world(settings), 2)) / 10
    return np.log(np.maximum(0.2, 1 - hidden.dispatch_rate * doublings * scale))


def context_exchange(hidden: HiddenParameters, settings: dict[str, Any]):
    cp, cp_span = settings.get("cp", 1), ParallelDims.of(settings).span("cp")
    if cp <= 1:
        return np.zeros_like(np.asarray(hidden.p2p_rate, float))
    kind = settings.get("cp_comm_type", "p2p")
    if kind == "p2p":
        loss = hidden.p2p_rate * max(0.0, np.log2(cp_span / NODE))
        if settings.get("activation_checkpointing") == "full":
            loss = loss / 2
    elif kind == "a2a":
        fast_up_to = np.asarray(hidden.a2a_fast_up_to, float)
        loss = hidden.a2a_rate * np.maximum(0.0, np.log2(cp_span / fast_up_to))
    else:
        loss = hidden.allgather_rate * np.log2(cp) * (cp - 1) / cp
    return np.log(1 - np.minimum(loss, 0.5))


def interleave(hidden: HiddenParameters, settings: dict[str, Any]):
    stages = settings.get("virtual_stages", 1)
    per_replica = max(settings.get("grad_accum_steps", 1), 1)
    loss = (hidden.interleave_rate * np.log2(max(stages, 1))
            * np.sqrt(settings.get("pp", 1) / per_replica))
    return np.log(1 - np.minimum(loss, 0.3))


def log_factor(hidden: HiddenParameters, settings: dict[str, Any], strength: float = 1.0):
    """log of the hidden multiplier of the three quirks on throughput, for one config (an
    array over the draws when `hidden` holds arrays)."""
    return strength * (expert_dispatch(hidden, settings) + context_exchange(hidden, settings)
                       + interleave(hidden, settings))
