"""The Slurm the tests submit to: whether one answers here (the one-node Slurm that
tests/slurm/start_local_slurm.sh starts, or the two-node cluster's), and a Slurm backend on it
with the tests' short time limit."""

from __future__ import annotations

import shutil
import subprocess


def slurm_missing() -> str | None:
    """Why no Slurm answers here, or None when one does."""
    if not shutil.which("sinfo"):
        return "no Slurm commands here (run tests/slurm/start_local_slurm.sh as root)"
    probe = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    if probe.returncode != 0 or not probe.stdout.strip():
        return f"Slurm does not answer: {probe.stderr.strip()[:200]}"
    return None


def slurm_backend(**spec):
    """A Slurm backend for two-GPU nodes, five minutes a job unless `spec` says otherwise."""
    from orchestrator.backends.slurm import SlurmBackend
    from orchestrator.campaign_spec import SlurmBackendSpec

    return SlurmBackend(SlurmBackendSpec(**{"time_limit_min": 5, **spec}), gpus_per_node=2)
