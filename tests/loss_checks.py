"""Shared by the trial job's equivalence tests (MoE, context parallelism, offload): how far a
layout's losses are from the reference run's, and a way to break one function for a run."""

from __future__ import annotations

import contextlib


def worst_relative_difference(losses: list[float], reference: list[float], steps: int) -> float:
    assert len(losses) == len(reference) == steps
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference))


@contextlib.contextmanager
def swapped(owner, name: str, replacement):
    """`owner.name` replaced by `replacement(original)` for the block."""
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)
