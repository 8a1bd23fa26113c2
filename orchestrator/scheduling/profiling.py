"""`paratune profile`: measure a cluster and write the preset the cost model uses.

The profiling job (jobs/profile.py) is submitted through a backend like any trial: a
TrialRequest with the job as its program, torchrun as its launcher and a trial folder under
the runs directory. Its measurements (GEMM speed by shape, collective time by size and group)
are fitted to the cost model's constants (costmodel/profile_fit.py), and the preset is
written as YAML that a spec names with `cluster: path/to/preset.yaml`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.backends import Backend, TrialRequest
from orchestrator.common.errors import UserError
from orchestrator.costmodel.profile_fit import profiled_cluster
from orchestrator.presets import Cluster
from orchestrator.space import Layout
from orchestrator.trainers import Measure, TrainerRun
from orchestrator.trainers.command import CommandTrainer
from orchestrator.trial.folder import TrialFolder


@dataclass(frozen=True)
class ProfileTarget:
    """Where a profile runs: a backend section (a spec's, or the local backend's), the preset
    it refines, its nodes and ranks per node, and the environment its trials get."""

    backend: Any
    base: Cluster
    nodes: int = 1
    ranks_per_node: int = 2
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    seq_len: int = 2048  # of the sequences the profiled model steps (campaigns' seq_len)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


def local_target(cluster: str, ranks: int, seq_len: int | None = None) -> ProfileTarget:
    """This machine, one node, a stock preset; sequences of `seq_len` tokens, by default the
    tiny model's on a CPU preset (what CPU campaigns train) and LLaMA's 2,048 on a GPU's."""
    from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
    from orchestrator.campaign_spec import LocalBackendSpec

    if cluster not in CLUSTER_PRESETS:
        raise UserError(f"--cluster: unknown preset {cluster!r}; choose one of "
                        f"{', '.join(CLUSTER_PRESETS)}")
    base = CLUSTER_PRESETS[cluster]
    if not 1 <= ranks <= base.gpus_per_node:
        raise UserError(f"--gpus: {ranks} is not 1..{base.gpus_per_node} (the profile runs on "
                        "one node here; --spec runs it on a campaign's nodes)")
    if seq_len is None:
        seq_len = MODEL_PRESETS["tiny"].seq_len if base.device == "cpu" else 2048
    return ProfileTarget(LocalBackendSpec(), base, 1, ranks, seq_len=seq_len)


def spec_target(spec, nodes: int | None, ranks: int | None, seq_len: int | None = None
                ) -> ProfileTarget:
    """A campaign's backend, cluster, nodes (or `nodes`), trial environment and sequence
    length (or `seq_len`)."""
    if spec.backend.kind == "simulated":
        raise UserError("--spec: backend.kind is simulated; a profile measures hardware: use "
                        "a spec whose backend is local, slurm or ray")
    count = spec.scale.nodes if nodes is None else nodes
    if count < 1 or (count > 1 and spec.backend.kind != "slurm"):
        # Ray gangs only rank-env trials across nodes; the profile is a torchrun job.
        raise UserError(f"--nodes: {count} is not a node count the {spec.backend.kind} backend "
                        "profiles (local and ray: 1; slurm: 1 or more)")
    per_node = spec.gpus_per_node if ranks is None else ranks
    if not 1 <= per_node <= spec.gpus_per_node:
        raise UserError(f"--gpus: {per_node} is not 1..{spec.gpus_per_node} (scale.gpus_per_node)")
    return ProfileTarget(spec.backend, spec.cluster, count, per_node, dict(spec.trial.env),
                         spec.trial.workdir, seq_len or spec.model.seq_len)


def profile_request(folder: TrialFolder, target: ProfileTarget, timeout_s: float
                    ) -> TrialRequest:
    run = TrainerRun(program=["-m", "jobs.profile", "--seq-len", str(target.seq_len)],
                     launcher="torchrun")
    world = target.world_size
    measure = Measure(world_size=world, seq_len=1, tokens_per_step=1,
                      model_flops_per_step=0.0, peak_tflops=1.0, warmup_steps=0)
    return TrialRequest(trial_id=folder.path.name, config=Layout(dp=world),
                        folder=folder, trainer=CommandTrainer(), run=run, measure=measure,
                        steps=1, timeout_s=timeout_s, env=dict(target.env),
                        workdir=target.workdir)


def run_profile(backend: Backend, folder: TrialFolder, target: ProfileTarget,
                timeout_s: float = 900.0) -> dict:
    """Submit the profiling job, wait for it, and return its measurements."""
    handle = backend.submit(profile_request(folder, target, timeout_s))
    while (result := handle.poll()) is None:
        time.sleep(0.2)
    if not result.ok or "profile" not in result.extra:
        raise UserError(f"profile: the job ended {result.status}: {result.error or 'no result'}"
                        f" (log in {folder.path})")
    return result.extra["profile"]


def write_preset(base: Cluster, profile: dict, path: Path, name: str | None = None) -> Cluster:
    cluster = profiled_cluster(base, profile, name)
    nodes = profile.get("nodes", 1)
    measured = "intra-node links and the network" if nodes > 1 else "intra-node links"
    if profile.get("runtime"):
        measured += " and PyTorch's software cost per collective"
    header = (f"# Cluster preset written by `paratune profile` from {base.name}: compute and\n"
              f"# {measured} measured on {profile.get('device')} x "
              f"{profile.get('world_size')} ranks on {nodes} node(s); the rest is "
              f"{base.name}'s.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(cluster.model_dump(), sort_keys=False))
    return cluster
