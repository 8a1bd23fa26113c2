"""Launch files that are a tool's configuration rather than a script: the built-in trainer's
YAML, a DeepSpeed config and Megatron's flags."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from orchestrator.common.errors import SpecError
from orchestrator.export.common import origin, printable, trials_python
from orchestrator.space import ParallelConfig
from orchestrator.spec import CampaignSpec
from orchestrator.trainers.builtin import job_settings
from orchestrator.export.program import winner_deepspeed_config
from orchestrator.trainers.deepspeed import DeepSpeedTrainer
from orchestrator.trainers.deepspeed_config import base_config, deepspeed_config
from orchestrator.trainers.megatron import TOOLS, megatron_args
from orchestrator.trainers.registry import trainer_for


def export_yaml(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    settings = job_settings(spec, config, trial_id)
    nodes = spec.scale.nodes
    torchrun = printable(f"{shlex.quote(trials_python())} -m torch.distributed.run")
    launch = (f"{torchrun} --nproc_per_node={spec.gpus_per_node}" if nodes == 1 else
              f"{torchrun} --nnodes={nodes} --node_rank=N --rdzv_backend=c10d "
              f"--rdzv_endpoint=HOST:29500 --nproc_per_node={spec.gpus_per_node}")
    header = (
        f"# {origin(spec, trial_id, config)}\n"
        f"# Run: {launch} -m jobs.train --config THIS_FILE\n"
    )
    return header + yaml.safe_dump(settings, sort_keys=False)


def export_deepspeed(spec: CampaignSpec, trial_id: str, config: ParallelConfig,
                     trial_dir: Path | None = None) -> str:
    """The DeepSpeed config the winning trial ran (its folder's copy) when the campaign ran
    one, else the layout's on the campaign's base config as it reads now; for a production
    run, without the keys only a trial needs."""
    own = "deepspeed" in trainer_for(spec).export_formats  # its trials ran a DeepSpeed config
    data = winner_deepspeed_config(
        spec, trial_dir if own else None,
        lambda: deepspeed_config(spec, config, base_config(spec) if own else None))
    data = {"_paratune": origin(spec, trial_id, config, DeepSpeedTrainer.tool),
            **{k: v for k, v in data.items() if k != "_paratune"}}
    return json.dumps(data, indent=2) + "\n"


def _export_megatron(tool: str, spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A bash array of `tool`'s model-shape and layout flags, rendered by the code trials run."""
    try:
        args = megatron_args(tool, spec, config)
    except SpecError as exc:  # a layout the tool cannot express: say so of the export
        raise SpecError(f"--format {tool}: the winner {config.key()} cannot be written for "
                        f"{tool} ({exc})") from None
    body = "\n".join(f"  {shlex.quote(a)}" for a in args)
    pair = (" Pair it with `--format deepspeed` saved as ds_config.json."
            if tool == "megatron-deepspeed" else "")
    return (f"# {origin(spec, trial_id, config, TOOLS[tool].source)}\n"
            f"# {tool} flags.{pair}\n"
            f"# Use: source THIS_FILE; torchrun ... pretrain_gpt.py YOUR_DATA_ARGS "
            f"\"${{MEGATRON_ARGS[@]}}\"\n"
            f"MEGATRON_ARGS=(\n{body}\n)\n")


def export_megatron_lm(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    return _export_megatron("megatron-lm", spec, trial_id, config)


def export_megatron_deepspeed(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    return _export_megatron("megatron-deepspeed", spec, trial_id, config)
