"""The built-in trainer's own configuration launch file, its YAML (the other tools' configuration
files are written by their trainers' folders: orchestrator/trainers/<tool>/export.py)."""

from __future__ import annotations

import shlex

import yaml

from orchestrator.export.common import origin, printable, trials_python
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.builtin.settings import job_settings


def export_yaml(spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    settings = job_settings(spec, layout, trial_id)
    nodes = spec.scale.nodes
    torchrun = printable(f"{shlex.quote(trials_python())} -m torch.distributed.run")
    launch = (f"{torchrun} --nproc_per_node={spec.gpus_per_node}" if nodes == 1 else
              f"{torchrun} --nnodes={nodes} --node_rank=N --rdzv_backend=c10d "
              f"--rdzv_endpoint=HOST:29500 --nproc_per_node={spec.gpus_per_node}")
    header = (
        f"# {origin(spec, trial_id, layout)}\n"
        f"# Run: {launch} -m jobs.train --config THIS_FILE\n"
    )
    return header + yaml.safe_dump(settings, sort_keys=False)
