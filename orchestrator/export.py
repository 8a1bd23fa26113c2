"""Launch files for a campaign's winner, to be reused as they are by production runs.

Formats: `yaml` (the built-in trainer's config, `python -m jobs.train --config FILE`),
`torchrun` (a shell script), `sbatch` (a Slurm batch script: srun + torchrun), `deepspeed` (a
DeepSpeed config JSON), `megatron` (Megatron-DeepSpeed arguments) and `torchtitan` (a torchrun
script with torchtitan 0.3.0's arguments). Each names the campaign and trial it came from.
"""

from __future__ import annotations

import json
import shlex

import yaml

from orchestrator.search_spaces import ParallelConfig
from orchestrator.spec import CampaignSpec, SlurmBackendSpec
from orchestrator.trainers.builtin import job_flags, job_settings
from orchestrator.trainers.deepspeed import base_config, deepspeed_config
from orchestrator.trainers.torchtitan import TOOL as TORCHTITAN
from orchestrator.trainers.torchtitan import export_values, torchtitan_args, torchtitan_section

FORMATS = ("yaml", "torchrun", "sbatch", "deepspeed", "megatron", "torchtitan")


def _origin(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    return (
        f"ParaTune campaign {spec.name!r}, trial {trial_id} ({config.key()}); "
        f"model {spec.model.name}, {spec.world_size} ranks on {spec.cluster.name}"
    )


def export_yaml(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    settings = job_settings(spec, config, trial_id)
    header = (
        f"# {_origin(spec, trial_id, config)}\n"
        f"# Run: torchrun --nproc_per_node={spec.gpus_per_node} -m jobs.train --config THIS_FILE\n"
    )
    return header + yaml.safe_dump(settings, sort_keys=False)


def _rendezvous(nodes: int) -> str:
    """Bash that sets RDZV: --standalone on one node, else c10d rendezvous from NNODES,
    NODE_RANK and MASTER_ADDR."""
    return f"""NNODES=${{NNODES:-{nodes}}}
if [ "$NNODES" -gt 1 ]; then
  RDZV=(--nnodes="$NNODES" --node_rank="${{NODE_RANK:?set NODE_RANK}}" --rdzv_backend=c10d \\
        --rdzv_endpoint="${{MASTER_ADDR:?set MASTER_ADDR}}:${{MASTER_PORT:-29500}}")
else
  RDZV=(--standalone)
fi"""


def export_torchrun(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A script for one node (--standalone) or, with NNODES/NODE_RANK/MASTER_ADDR set, many."""
    pairs = job_flags(job_settings(spec, config, trial_id))
    flags = " \\\n    ".join(shlex.join(pairs[i:i + 2]) for i in range(0, len(pairs), 2))
    nodes = spec.scale.nodes
    return f"""#!/usr/bin/env bash
# {_origin(spec, trial_id, config)}
set -euo pipefail
{_rendezvous(nodes)}
exec torchrun "${{RDZV[@]}}" --nproc_per_node={spec.gpus_per_node} -m jobs.train \\
    {flags} "$@"
"""


def export_sbatch(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """One torchrun per node under srun, rendezvous on the allocation's first node."""
    pairs = job_flags(job_settings(spec, config, trial_id))
    flags = " \\\n    ".join(shlex.join(pairs[i:i + 2]) for i in range(0, len(pairs), 2))
    # A campaign tuned on another backend exports with Slurm's defaults (60 min, no partition).
    b = spec.backend if isinstance(spec.backend, SlurmBackendSpec) else SlurmBackendSpec()
    directives = [f"--job-name=paratune-{spec.name}", f"--nodes={spec.scale.nodes}",
                  "--ntasks-per-node=1", f"--time={b.time_limit_min}"]
    if spec.cluster.device != "cpu":
        directives.append(f"--gpus-per-node={spec.gpus_per_node}")
    for key in ("partition", "account", "qos", "constraint", "cpus_per_task"):
        if getattr(b, key) is not None:
            directives.append(f"--{key.replace('_', '-')}={getattr(b, key)}")
    directives += [f"--{k}={v}" for k, v in b.sbatch_args.items()]
    lines = "\n".join(f"#SBATCH {d}" for d in directives)
    setup = "\n".join(b.setup)
    env = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in spec.trial.env.items())
    return f"""#!/bin/bash
{lines}
# {_origin(spec, trial_id, config)}
set -euo pipefail
{setup}
{env}
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --ntasks-per-node=1 bash -c 'exec torchrun --nnodes="$SLURM_JOB_NUM_NODES" \
    --node_rank="$SLURM_NODEID" --nproc_per_node={spec.gpus_per_node} --rdzv_backend=c10d \
    --rdzv_id="$SLURM_JOB_ID" --rdzv_endpoint="'"$MASTER_ADDR"':29500" -m jobs.train "$@"' _ \
    {flags}
"""


def export_deepspeed(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    base = base_config(spec) if spec.trial.trainer == "deepspeed" else None
    data = {"_paratune": _origin(spec, trial_id, config), **deepspeed_config(spec, config, base)}
    return json.dumps(data, indent=2) + "\n"


def megatron_args(spec: CampaignSpec, config: ParallelConfig) -> list[str]:
    m = spec.model
    args = [
        f"--tensor-model-parallel-size={config.tp}", f"--pipeline-model-parallel-size={config.pp}",
        f"--micro-batch-size={config.micro_batch_size}",
        f"--global-batch-size={config.global_batch_size()}", f"--num-layers={m.num_layers}",
        f"--hidden-size={m.hidden}", f"--ffn-hidden-size={m.ffn_hidden}",
        f"--num-attention-heads={m.num_heads}", f"--seq-length={m.seq_len}",
        f"--max-position-embeddings={m.seq_len}",
    ]
    if m.kv_heads != m.num_heads:
        args += ["--group-query-attention", f"--num-query-groups={m.kv_heads}"]
    if m.gated_mlp:
        args += ["--swiglu", "--normalization=RMSNorm", "--use-rotary-position-embeddings",
                 "--untie-embeddings-and-output-weights"]
    if spec.cluster.device != "cpu":
        args.append("--bf16")
    if config.sequence_parallel:
        args.append("--sequence-parallel")
    if config.activation_checkpointing == "full":
        args += ["--recompute-granularity=full", "--recompute-method=uniform"]
    elif config.activation_checkpointing == "selective":
        args.append("--recompute-granularity=selective")
    if config.virtual_stages > 1:
        args.append(f"--num-layers-per-virtual-pipeline-stage="
                    f"{m.num_layers // (config.pp * config.virtual_stages)}")
    if spec.trial.flash_attention:
        args.append("--use-flash-attn")
    args += ["--deepspeed", "--deepspeed_config=ds_config.json", f"--zero-stage={config.zero_stage}"]
    return args


def export_megatron(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A bash array of Megatron-DeepSpeed arguments (pair with `--format deepspeed`)."""
    body = "\n".join(f"  {shlex.quote(a)}" for a in megatron_args(spec, config))
    return (f"# {_origin(spec, trial_id, config)}\n"
            f"# Use: source THIS_FILE; torchrun ... pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\"\n"
            f"MEGATRON_ARGS=(\n{body}\n)\n")


def export_torchtitan(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A torchrun script for torchtitan 0.3.0 (which reads no TOML job file): the trial's
    `--module/--config`, the user's overrides and the layout's, as trials ran them less their
    own steps, log frequency and output folder."""
    args = torchtitan_args(spec, config, export_values(spec, config, trial_id))
    body = "\n".join(f"  {shlex.quote(a)}" for a in args)
    entry = shlex.quote(torchtitan_section(spec).entry)
    launch = f"--nproc_per_node={spec.gpus_per_node} -m {entry}"
    return f"""#!/usr/bin/env bash
# For {TORCHTITAN}: {_origin(spec, trial_id, config)}
# The layout's flags come after the overrides (the layout wins); torchtitan derives gradient
# accumulation as global_batch_size / (local_batch_size x data-parallel degree). Add flags to
# ARGS before the activation-checkpoint subcommand: arguments after it belong to it.
set -euo pipefail
{_rendezvous(spec.scale.nodes)}
ARGS=(
{body}
)
exec torchrun "${{RDZV[@]}}" {launch} "${{ARGS[@]}}"
"""


EXPORTERS = {"yaml": export_yaml, "torchrun": export_torchrun, "sbatch": export_sbatch,
             "deepspeed": export_deepspeed, "megatron": export_megatron,
             "torchtitan": export_torchtitan}


def export(fmt: str, spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    if fmt not in EXPORTERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return EXPORTERS[fmt](spec, trial_id, config)
