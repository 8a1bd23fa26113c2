"""Backends run trials: `local` (torchrun subprocesses) and `simulated` (the cost model).

Each kind is one module; `make_backend` builds the one a spec names.
"""

from __future__ import annotations

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.simulated import SimulatedBackend


def make_backend(backend_spec, *, cost_model=None, steps: int = 10) -> Backend:
    """`backend_spec` is the spec's `backend` section; `cost_model` answers simulated trials."""
    if backend_spec.kind == "local":
        return LocalBackend()
    if backend_spec.kind == "simulated":
        return SimulatedBackend(
            cost_model, noise=backend_spec.noise, failure_rate=backend_spec.failure_rate,
            perturbation=backend_spec.perturbation, seed=backend_spec.seed, steps=steps,
            latency_s=backend_spec.latency_s,
        )
    raise ValueError(f"unknown backend kind {backend_spec.kind!r}")  # the spec rejects it first


__all__ = [
    "Backend", "LocalBackend", "SimulatedBackend", "TrialHandle", "TrialRequest", "make_backend",
]
