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

`strength` scales all three (0 turns them off, 1 is the size described above). The quirks of
expert, context and interleaved pipeline parallelism are in parallel_quirks.py.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

QUIRKS = ("collective", "kernel", "product")
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


def log_factor(seed: int, settings: dict[str, Any], strength: float) -> float:
    """log of the hidden multiplier of all quirks on throughput, for one config."""
    if strength <= 0:
        return 0.0
    return strength * (collective(seed, settings) + kernel(seed, settings)
                       + product(seed, settings))
