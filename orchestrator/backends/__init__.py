"""Backends run trials: `local` (torchrun process trees), `simulated` (the cost model), `ray`
(a detached Ray actor per trial) and `slurm` (one Slurm job per trial, through submitit).

Each kind is one module behind the `Backend` base (base.py); `make_backend` builds the one a
spec's `backend` section names. Ray and submitit are imported only when chosen.
"""

from __future__ import annotations

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.simulated import SimulatedBackend


def make_backend(backend_spec, *, cost_model=None, gpus_per_node: int = 1,
                 use_gpus: bool = False) -> Backend:
    """`backend_spec` is the spec's `backend` section; `cost_model` answers simulated trials."""
    if backend_spec.kind == "local":
        return LocalBackend()
    if backend_spec.kind == "simulated":
        return SimulatedBackend(
            cost_model, noise=backend_spec.noise, failure_rate=backend_spec.failure_rate,
            perturbation=backend_spec.perturbation, seed=backend_spec.seed,
            latency_s=backend_spec.latency_s, interactions=backend_spec.interactions,
            parallel_quirks=backend_spec.parallel_quirks,
        )
    if backend_spec.kind == "ray":
        from orchestrator.backends.ray import RayBackend

        return RayBackend(address=backend_spec.address, num_cpus=backend_spec.num_cpus,
                          gpus_per_trial_rank=backend_spec.gpus_per_rank,
                          ranks_per_node=gpus_per_node)
    if backend_spec.kind == "slurm":
        from orchestrator.backends.slurm import SlurmBackend

        return SlurmBackend(backend_spec, gpus_per_node=gpus_per_node, use_gpus=use_gpus)
    raise ValueError(f"unknown backend kind {backend_spec.kind!r}")  # the spec rejects it first


__all__ = [
    "Backend", "LocalBackend", "SimulatedBackend", "TrialHandle", "TrialRequest", "make_backend",
]
