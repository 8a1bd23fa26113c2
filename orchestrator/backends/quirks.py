"""Hidden quirks of the simulated backend that depend on several knobs at once.

A real cluster is wrong about the cost model in ways no single knob explains. Each quirk is a
seeded function of a config's settings, hidden from the searchers (they never import backends):

- `collective`: a (tp, data-parallel group layout) combination falls off the collective's fast
  path (a ring where a tree was expected, a group that straddles nodes) and runs 12-30% slower;
  full activation recomputation overlaps half of that loss. One combination in three is hit.
- `kernel`: a matmul kernel is fast only for some (micro-batch, tp, recomputation) shapes:
  one shape in four runs 8-25% faster.
- `product`: an overhead that grows with a product of knobs: the activation volume of one
  micro-batch (micro_batch · tp, larger without recomputation) times the depth it crosses
  (pipeline stages, inter-node shard groups), log2 each, at a seeded rate.
- `expert_dispatch`: a threshold and a growth with scale. The expert all-to-all stays fast
  while its group (ep times the expert tensor-parallel size) is within a seeded span of 8 or
  16 ranks; past it, each doubling costs 6-14%, more on larger clusters (log2 of the world
  size over 10).
- `context_exchange`: cp, its exchange and tp together. A p2p ring hides its transfers while
  cp x tp stays in one node of 8 and loses 4-10% per doubling of cp x tp past it, half of that
  with full recomputation (more compute to hide behind); all-to-all is fast up to a seeded
  cp x tp of 4 or 8 and then costs 5-12% per doubling over it; all-gather pays a seeded 3-8%
  times log2(cp) x (cp - 1) / cp. At most half the throughput is lost.
- `interleave`: virtual pipeline stages cost extra point-to-point sends and launches that the
  bubble saving hides only with enough micro-batches: a seeded 1.5-4% times log2 of the
  stages per rank times the square root of pp over the micro-batches per replica
  (grad_accum_steps), at most 30%.

The first three scale with `log_factor`'s strength (the backend's `interactions`), the last
three with `parallel_log_factor`'s (its `parallel_quirks`), so the landscapes drawn before the
last three existed keep their truth. Each of the last three is zero where its knobs sit at
their defaults (no ep, cp or interleaving). A strength of 0 turns quirks off, 1 gives the
sizes described above.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

QUIRKS = ("collective", "kernel", "product")
PARALLEL_QUIRKS = ("expert_dispatch", "context_exchange", "interleave")
ACTIVATIONS = {"none": 4, "selective": 2, "full": 1}  # activation volume kept per layer


def rng(*parts: object) -> random.Random:
    """A generator seeded by the parts (stable across processes and Python versions)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _layout(settings: dict[str, Any]) -> tuple:
    """The data-parallel group layout: the AMSP factors when given, else (ZeRO stage, dp)."""
    amsp = tuple(settings.get(k) for k in ("s0p", "s1p", "s0g", "s1g", "s0os", "s1os"))
    if any(v not in (None, 1) for v in amsp):
        return ("amsp",) + amsp
    return ("zero", settings.get("zero_stage", 0), settings.get("dp", 1))


def collective(seed: int, settings: dict[str, Any]) -> float:
    r = rng(seed, "collective", settings.get("tp", 1), _layout(settings))
    if r.random() >= 1 / 3:
        return 0.0
    loss = r.uniform(0.12, 0.30)
    if settings.get("activation_checkpointing") == "full":
        loss /= 2
    return math.log(1 - loss)


def kernel(seed: int, settings: dict[str, Any]) -> float:
    shape = (settings.get("micro_batch_size", 1), settings.get("tp", 1),
             settings.get("activation_checkpointing", "none"))
    r = rng(seed, "kernel", shape)
    return math.log(1 + r.uniform(0.08, 0.25)) if r.random() < 0.25 else 0.0


def product(seed: int, settings: dict[str, Any]) -> float:
    volume = (settings.get("micro_batch_size", 1) * settings.get("tp", 1)
              * ACTIVATIONS.get(settings.get("activation_checkpointing", "none"), 1))
    depth = settings.get("pp", 1) * max(settings.get("s1g") or 1, settings.get("s1os") or 1)
    rate = rng(seed, "product").uniform(0.006, 0.014)
    return -math.log(1 + rate * math.log2(max(volume, 1)) * math.log2(max(depth, 1)))


NODE = 8  # ranks in one fast domain, the hidden truth's (the searchers are not told)


def _world(settings: dict[str, Any]) -> int:
    return (settings.get("tp", 1) * settings.get("pp", 1) * settings.get("dp", 1)
            * settings.get("cp", 1))


def expert_dispatch(seed: int, settings: dict[str, Any]) -> float:
    group = settings.get("ep", 1) * (settings.get("etp") or 1)
    r = rng(seed, "expert_dispatch")
    span, rate = r.choice((8, 16)), r.uniform(0.06, 0.14)
    if group <= span:
        return 0.0
    doublings = math.log2(group / span)
    return math.log(max(0.2, 1 - rate * doublings * math.log2(max(_world(settings), 2)) / 10))


def context_exchange(seed: int, settings: dict[str, Any]) -> float:
    cp, tp = settings.get("cp", 1), settings.get("tp", 1)
    if cp <= 1:
        return 0.0
    kind = settings.get("cp_comm_type", "p2p")
    r = rng(seed, "context_exchange", kind)
    if kind == "p2p":
        loss = r.uniform(0.04, 0.10) * max(0.0, math.log2(cp * tp / NODE))
        if settings.get("activation_checkpointing") == "full":
            loss /= 2
    elif kind == "a2a":
        fast_up_to = r.choice((4, 8))
        loss = r.uniform(0.05, 0.12) * max(0.0, math.log2(cp * tp / fast_up_to))
    else:
        loss = r.uniform(0.03, 0.08) * math.log2(cp) * (cp - 1) / cp
    return math.log(1 - min(loss, 0.5))


def interleave(seed: int, settings: dict[str, Any]) -> float:
    stages = settings.get("virtual_stages", 1)
    if stages <= 1:
        return 0.0
    rate = rng(seed, "interleave").uniform(0.015, 0.04)
    per_replica = max(settings.get("grad_accum_steps", 1), 1)
    loss = rate * math.log2(stages) * math.sqrt(settings.get("pp", 1) / per_replica)
    return math.log(1 - min(loss, 0.3))


def log_factor(seed: int, settings: dict[str, Any], strength: float) -> float:
    """log of the hidden multiplier of all quirks on throughput, for one config."""
    if strength <= 0:
        return 0.0
    return strength * (collective(seed, settings) + kernel(seed, settings)
                       + product(seed, settings))


def parallel_log_factor(seed: int, settings: dict[str, Any], strength: float) -> float:
    """log of the hidden multiplier of the expert, context and interleaving quirks."""
    if strength <= 0:
        return 0.0
    return strength * (expert_dispatch(seed, settings) + context_exchange(seed, settings)
                       + interleave(seed, settings))
