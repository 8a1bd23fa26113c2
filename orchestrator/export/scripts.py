"""Launch files that are shell scripts: torchrun and sbatch for the built-in trainer, torchrun
for torchtitan, and a campaign's own `trial.command`. Each sets the trials' `trial.env`; the
torchtitan and command ones also run in the folder the trials ran in, where their relative
paths start (the built-in trainer reads no file, so its scripts run from anywhere:
common.run_context). Every value from the spec is one quoted shell word."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

from orchestrator.common.errors import SpecError
from orchestrator.common.placeholders import PLACEHOLDER_PATTERN
from orchestrator.export.common import origin, run_context
from orchestrator.space import ParallelConfig
from orchestrator.spec import CampaignSpec, SlurmBackendSpec
from orchestrator.spec.strings import SBATCH_OPTION, SBATCH_VALUE
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.builtin import job_flags, job_settings
from orchestrator.trainers.deepspeed import deepspeed_config
from orchestrator.trainers.torchtitan import TOOL as TORCHTITAN
from orchestrator.trainers.torchtitan import export_values, torchtitan_args, torchtitan_section
from orchestrator.trial.folder import DEEPSPEED_CONFIG_FILE

# #SBATCH options the script's own launch line depends on: sbatch_args may not change them.
LAYOUT_OPTIONS = ("nodes", "ntasks-per-node")


def _directive(option: str, value: object) -> str:
    """One `#SBATCH --option=value` line; sbatch reads it without a shell, but a line break or
    a quote would still change what it reads (the spec refuses those; this holds regardless)."""
    text = str(value)
    if not SBATCH_OPTION.fullmatch(option) or not SBATCH_VALUE.fullmatch(text):
        raise ValueError(f"#SBATCH --{option}: {text!r} is not one word")
    return f"#SBATCH --{option}={text}"


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


def _job_flags(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    pairs = job_flags(job_settings(spec, config, trial_id))
    return " \\\n    ".join(shlex.join(pairs[i:i + 2]) for i in range(0, len(pairs), 2))


def export_torchrun(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A script for one node (--standalone) or, with NNODES/NODE_RANK/MASTER_ADDR set, many."""
    return f"""#!/usr/bin/env bash
# {origin(spec, trial_id, config)}
set -euo pipefail
{run_context(spec, in_workdir=False)}{_rendezvous(spec.scale.nodes)}
exec torchrun "${{RDZV[@]}}" --nproc_per_node={spec.gpus_per_node} -m jobs.train \\
    {_job_flags(spec, trial_id, config)} "$@"
"""


def sbatch_directives(spec: CampaignSpec) -> list[tuple[str, object]]:
    """The script's #SBATCH options: one task per node (torchrun starts its ranks), with the
    CPUs the trials' one-task-per-rank jobs had, then the backend's own; `sbatch_args` replace
    an option of the same name, except the two the launch line depends on."""
    # A campaign tuned on another backend exports with Slurm's defaults (60 min, no partition).
    b = spec.backend if isinstance(spec.backend, SlurmBackendSpec) else SlurmBackendSpec()
    options: dict[str, object] = {"job-name": f"paratune-{spec.name}",
                                  "nodes": spec.scale.nodes, "ntasks-per-node": 1,
                                  "time": b.time_limit_min}
    if spec.cluster.device != "cpu":
        options["gpus-per-node"] = spec.gpus_per_node
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(b, key) is not None:
            options[key] = getattr(b, key)
    if b.cpus_per_task is not None:  # trials ran a task per rank; here a node's ranks share one
        options["cpus-per-task"] = b.cpus_per_task * spec.gpus_per_node
    for key, value in b.sbatch_args.items():
        option = key.replace("_", "-")
        if option in LAYOUT_OPTIONS and str(value) != str(options[option]):
            raise SpecError(f"backend.sbatch_args.{key}: {value} differs from the launch "
                            f"file's --{option}={options[option]}, which its srun line needs; "
                            "remove it")
        options[option] = value
    return list(options.items())


def export_sbatch(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """One torchrun per node under srun, rendezvous on the allocation's first node."""
    b = spec.backend if isinstance(spec.backend, SlurmBackendSpec) else SlurmBackendSpec()
    lines = "\n".join(_directive(option, value) for option, value in sbatch_directives(spec))
    setup = "".join(line + "\n" for line in b.setup)  # the user's own shell lines, as written
    return f"""#!/bin/bash
{lines}
# {origin(spec, trial_id, config)}
set -euo pipefail
{setup}{run_context(spec, in_workdir=False)}MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --ntasks-per-node=1 bash -c 'exec torchrun --nnodes="$SLURM_JOB_NUM_NODES" \
    --node_rank="$SLURM_NODEID" --nproc_per_node={spec.gpus_per_node} --rdzv_backend=c10d \
    --rdzv_id="$SLURM_JOB_ID" --rdzv_endpoint="'"$MASTER_ADDR"':29500" -m jobs.train "$@"' _ \
    {_job_flags(spec, trial_id, config)} "$@"
"""


def export_torchtitan(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A torchrun script for torchtitan 0.3.0 (which reads no TOML job file): the trial's
    `--module/--config`, the user's overrides and the layout's, as trials ran them less their
    own steps, log frequency and output folder."""
    args = torchtitan_args(spec, config, export_values(spec, config, trial_id))
    body = "\n".join(f"  {shlex.quote(a)}" for a in args)
    entry = shlex.quote(torchtitan_section(spec).entry)
    launch = f"--nproc_per_node={spec.gpus_per_node} -m {entry}"
    return f"""#!/usr/bin/env bash
# {origin(spec, trial_id, config, TORCHTITAN)}
# The layout's flags come after the overrides (the layout wins); torchtitan derives gradient
# accumulation as global_batch_size / (local_batch_size x data-parallel degree). Add flags to
# ARGS before the activation-checkpoint subcommand: arguments after it belong to it.
set -euo pipefail
{run_context(spec)}{_rendezvous(spec.scale.nodes)}
ARGS=(
{body}
)
exec torchrun "${{RDZV[@]}}" {launch} "${{ARGS[@]}}"
"""


# Placeholders whose value is a path in the run's own folder, expanded when the script runs.
RUN_DIR_WORDS = {"trial_dir": '"$RUN_DIR"',
                 "deepspeed_config": f'"$RUN_DIR"/{DEEPSPEED_CONFIG_FILE}'}
CONFIG_END = "PARATUNE_DEEPSPEED_CONFIG_END"


def shell_word(item: str, values: dict) -> str:
    """One argv item as one shell word: text and values single-quoted, run-folder paths
    double-quoted so that only $RUN_DIR expands."""
    parts, last = [], 0
    for match in PLACEHOLDER_PATTERN.finditer(item):
        parts.append(item[last:match.start()] and shlex.quote(item[last:match.start()]))
        parts.append(RUN_DIR_WORDS.get(match.group(1))
                     or shlex.quote(fill([match.group(0)], values)[0]))
        last = match.end()
    parts.append(item[last:] and shlex.quote(item[last:]))
    return "".join(parts) or "''"


def export_command(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """The campaign's own `trial.command` as its winner ran it: the layout's values filled,
    in the folder the trials ran in, with the spec's environment. `{trial_dir}` and
    `{deepspeed_config}` point into $RUN_DIR (default ./paratune-run), where the script first
    writes the layout's DeepSpeed config (a trial's folder belongs to the campaign)."""
    if spec.trial.command is None:
        raise SpecError(f"--format command: campaign {spec.name!r} ran trainer "
                        f"{spec.trial.trainer!r}, not a trial.command; use its own format")
    # The run folder's paths are shell words (RUN_DIR_WORDS): no folder is needed here.
    values = placeholder_values(spec, config, trial_id,
                                SimpleNamespace(path="", deepspeed_config=""), spec.trial.steps)
    words = " \\\n    ".join(shell_word(item, values) for item in spec.trial.command)
    config_file = ""
    if any("{deepspeed_config}" in item for item in spec.trial.command):
        text = json.dumps(deepspeed_config(spec, config), indent=2)
        config_file = (f"cat > \"$RUN_DIR\"/{DEEPSPEED_CONFIG_FILE} <<'{CONFIG_END}'\n"
                       f"{text}\n{CONFIG_END}\n")
    tool = "the campaign's own trial.command"
    return f"""#!/usr/bin/env bash
# {origin(spec, trial_id, config, tool)}
# {{steps}} is the campaign's trial.steps ({spec.trial.steps}): change it for a long run.
set -euo pipefail
mkdir -p "${{RUN_DIR:=paratune-run}}"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
{config_file}{run_context(spec)}exec {words}
"""
