"""Launch files that are shell scripts: torchrun and sbatch for the built-in trainer, and the
pieces every script shares (rendezvous, #SBATCH lines; a trainer's own script, such as
torchtitan's, is its folder's export.py). Each sets the trials' `trial.env`; the built-in
trainer reads no file, so its scripts run from anywhere (common.run_context). Every value from the spec is one quoted shell word. Other trainers'
programs: program_scripts.py."""

from __future__ import annotations

import shlex

from orchestrator.common.errors import SpecError
from orchestrator.export.common import interpreter, origin, run_context
from orchestrator.export.program import LONGER, length_note
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec, SlurmBackendSpec
from orchestrator.campaign_spec.strings import SBATCH_OPTION, SBATCH_VALUE
from orchestrator.trainers.builtin.settings import job_flags, job_settings

# #SBATCH options the script's own launch line depends on: sbatch_args may not change them.
LAYOUT_OPTIONS = ("nodes", "ntasks-per-node")
# One torchrun per node under srun, of the trials' Python: `bash -c`'s $0 is that Python, its
# "$@" the program and its arguments; the caller ends the quoted command and passes them.
SRUN_TORCHRUN = """srun --ntasks-per-node=1 bash -c 'exec "$0" -m torch.distributed.run \\
    --nnodes="$SLURM_JOB_NUM_NODES" --node_rank="$SLURM_NODEID" --nproc_per_node={gpus} \\
    --rdzv_backend=c10d --rdzv_id="$SLURM_JOB_ID" --rdzv_endpoint="'"$MASTER_ADDR"':29500\""""


def directive(option: str, value: object) -> str:
    """One `#SBATCH --option=value` line; sbatch reads it without a shell, but a line break or
    a quote would still change what it reads (the spec refuses those; this holds regardless)."""
    text = str(value)
    if not SBATCH_OPTION.fullmatch(option) or not SBATCH_VALUE.fullmatch(text):
        raise ValueError(f"#SBATCH --{option}: {text!r} is not one word")
    return f"#SBATCH --{option}={text}"


def rendezvous(nodes: int) -> str:
    """Bash that sets RDZV: --standalone on one node, else c10d rendezvous from NNODES,
    NODE_RANK and MASTER_ADDR."""
    return f"""NNODES=${{NNODES:-{nodes}}}
if [ "$NNODES" -gt 1 ]; then
  RDZV=(--nnodes="$NNODES" --node_rank="${{NODE_RANK:?set NODE_RANK}}" --rdzv_backend=c10d \\
        --rdzv_endpoint="${{MASTER_ADDR:?set MASTER_ADDR}}:${{MASTER_PORT:-29500}}")
else
  RDZV=(--standalone)
fi"""


def _job_flags(spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    pairs = job_flags(job_settings(spec, layout, trial_id))
    return " \\\n    ".join(shlex.join(pairs[i:i + 2]) for i in range(0, len(pairs), 2))


def builtin_length_note(spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    """The built-in trainer's flags that carry the trials' length, named in a comment."""
    short = job_flags(job_settings(spec, layout, trial_id))
    long = job_flags(job_settings(spec, layout, trial_id, spec.trial.steps + LONGER))
    changed = {i for i, (a, b) in enumerate(zip(short, long)) if a != b}
    return length_note(spec, [w for i, w in enumerate(short) if i in changed or i + 1 in changed])


def sbatch_setup(spec: CampaignSpec) -> str:
    """The Slurm backend's `setup` lines, the user's own shell, as written."""
    b = spec.backend if isinstance(spec.backend, SlurmBackendSpec) else SlurmBackendSpec()
    return "".join(line + "\n" for line in b.setup)


def sbatch_lines(spec: CampaignSpec) -> str:
    """The #SBATCH lines, each line ending in a newline. A Slurm campaign's time limit is the
    trials' and is marked so; any other campaign ran under no Slurm limit, so the --time line
    is left commented out for the user to set."""
    lines = []
    for option, value in sbatch_directives(spec):
        if option == "time":
            lines.append("# --time below is the trials' limit (backend.time_limit_min or "
                         "sbatch_args.time): set the run's own.")
        lines.append(directive(option, value))
    if not isinstance(spec.backend, SlurmBackendSpec):
        lines += ["# The trials ran under no Slurm time limit: set the run's own on the line "
                  "below and remove its first '#'.", "##SBATCH --time="]
    return "".join(line + "\n" for line in lines)


def export_torchrun(spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    """A script for one node (--standalone) or, with NNODES/NODE_RANK/MASTER_ADDR set, many."""
    return f"""#!/usr/bin/env bash
# {origin(spec, trial_id, layout)}
{builtin_length_note(spec, trial_id, layout)}set -euo pipefail
{interpreter()}{run_context(spec, in_workdir=False)}{rendezvous(spec.scale.nodes)}
exec "$PYTHON" -m torch.distributed.run "${{RDZV[@]}}" --nproc_per_node={spec.gpus_per_node} \\
    -m jobs.train \\
    {_job_flags(spec, trial_id, layout)} "$@"
"""


def sbatch_directives(spec: CampaignSpec) -> list[tuple[str, object]]:
    """The script's #SBATCH options: one task per node (torchrun starts its ranks), with the
    CPUs the trials' one-task-per-rank jobs had, then the backend's own; `sbatch_args` replace
    an option of the same name, except the two the launch line depends on."""
    # A campaign tuned on another backend exports with Slurm's defaults (no partition) and no
    # time limit: its trials ran under none (sbatch_lines).
    slurm = isinstance(spec.backend, SlurmBackendSpec)
    b = spec.backend if isinstance(spec.backend, SlurmBackendSpec) else SlurmBackendSpec()
    options: dict[str, object] = {"job-name": f"paratune-{spec.name}",
                                  "nodes": spec.scale.nodes, "ntasks-per-node": 1}
    if slurm:
        options["time"] = b.time_limit_min
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


def export_sbatch(spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    """One torchrun per node under srun, rendezvous on the allocation's first node."""
    return f"""#!/bin/bash
{sbatch_lines(spec)}# {origin(spec, trial_id, layout)}
{builtin_length_note(spec, trial_id, layout)}set -euo pipefail
{sbatch_setup(spec)}{interpreter()}{run_context(spec, in_workdir=False)}MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
{SRUN_TORCHRUN.format(gpus=spec.gpus_per_node)} -m jobs.train "$@"' "$PYTHON" \\
    {_job_flags(spec, trial_id, layout)} "$@"
"""
