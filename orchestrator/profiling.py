"""`paratune profile`: measure a cluster and write the preset the cost model uses.

The profiling job (jobs/profile.py) is submitted through a backend like any trial: a
TrialRequest with the job as its program, torchrun as its launcher and a trial folder under
the runs directory. Its measurements (GEMM speed by shape, collective time by size and group)
are fitted to the cost model's constants (costmodel/profile_fit.py), and the preset is
written as YAML that a spec names with `cluster: path/to/preset.yaml`.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from orchestrator.backends import Backend, TrialRequest
from orchestrator.costmodel.profile_fit import profiled_cluster
from orchestrator.errors import UserError
from orchestrator.presets import Cluster
from orchestrator.search_spaces import ParallelConfig
from orchestrator.trainers import Measure, TrainerRun
from orchestrator.trainers.command import CommandTrainer
from orchestrator.trial_folder import TrialFolder


def profile_request(folder: TrialFolder, world_size: int, timeout_s: float) -> TrialRequest:
    run = TrainerRun(program=["-m", "jobs.profile"], launcher="torchrun")
    measure = Measure(world_size=world_size, seq_len=1, tokens_per_step=1,
                      model_flops_per_step=0.0, peak_tflops=1.0, warmup_steps=0)
    return TrialRequest(trial_id=folder.path.name, config=ParallelConfig(dp=world_size),
                        folder=folder, trainer=CommandTrainer(), run=run, measure=measure,
                        steps=1, timeout_s=timeout_s)


def run_profile(backend: Backend, folder: TrialFolder, world_size: int,
                timeout_s: float = 600.0) -> dict:
    """Submit the profiling job, wait for it, and return its measurements."""
    handle = backend.submit(profile_request(folder, world_size, timeout_s))
    while (result := handle.poll()) is None:
        time.sleep(0.2)
    if not result.ok or "profile" not in result.extra:
        raise UserError(f"profile: the job ended {result.status}: {result.error or 'no result'}"
                        f" (log in {folder.path})")
    return result.extra["profile"]


def write_preset(base: Cluster, profile: dict, path: Path, name: str | None = None) -> Cluster:
    cluster = profiled_cluster(base, profile, name)
    header = (f"# Cluster preset written by `paratune profile` from {base.name}: compute and\n"
              f"# intra-node links measured on {profile.get('device')} x "
              f"{profile.get('world_size')} ranks; the rest is {base.name}'s.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(cluster.model_dump(), sort_keys=False))
    return cluster
