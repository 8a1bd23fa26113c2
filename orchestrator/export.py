"""Launch files for a campaign's winner, to be reused as they are by production runs.

Formats: `yaml` (the built-in trainer's config, `python -m jobs.train --config FILE`),
`torchrun` (a shell script), `sbatch` (a Slurm batch script: srun + torchrun), `deepspeed` (a
DeepSpeed config JSON), `megatron-lm` and `megatron-deepspeed` (a bash array of the tool's flags,
rendered by the same code as the trials; `megatron` is the old name of `megatron-deepspeed`) and
`torchtitan` (a torchrun
script with torchtitan 0.3.0's arguments) and `command` (a campaign's own `trial.command`, as
its trials ran it). Each names the campaign and trial it came from.
"""

from __future__ import annotations

import json
import shlex
from importlib.metadata import version
from types import SimpleNamespace

import yaml

from orchestrator.errors import SpecError
from orchestrator.placeholders import PLACEHOLDER_PATTERN
from orchestrator.search_spaces import ParallelConfig
from orchestrator.spec import CampaignSpec, SlurmBackendSpec
from orchestrator.spec.strings import ENV_NAME, SBATCH_OPTION, SBATCH_VALUE
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.builtin import BuiltinTrainer, job_flags, job_settings
from orchestrator.trainers.deepspeed import DeepSpeedTrainer, base_config, deepspeed_config
from orchestrator.trainers.megatron import TOOLS, megatron_args
from orchestrator.trainers.torchtitan import TOOL as TORCHTITAN
from orchestrator.trainers.torchtitan import export_values, torchtitan_args, torchtitan_section
from orchestrator.trial_folder import DEEPSPEED_CONFIG_FILE

BUILTIN_TOOL = f"{BuiltinTrainer.tool} under torchrun, PyTorch {version('torch')}"
# `megatron`, the name older releases used, stays another name of `megatron-deepspeed`.
FORMATS = ("yaml", "torchrun", "sbatch", "deepspeed", "megatron-lm", "megatron-deepspeed",
           "megatron", "torchtitan", "command")
SCRIPT_FORMATS = ("torchrun", "sbatch", "torchtitan", "command")  # written executable

# The formats that run the program a campaign measured, its own first; any other runs
# another program with the winner's layout, which the campaign never measured.
OWN_FORMATS = {"builtin": ("torchrun", "yaml", "sbatch"), "deepspeed": ("deepspeed",),
               "torchtitan": ("torchtitan",), "megatron-lm": ("megatron-lm",),
               "megatron-deepspeed": ("megatron-deepspeed", "megatron", "deepspeed"),
               "command": ("command", "deepspeed")}


def own_format(spec: CampaignSpec) -> str:
    return OWN_FORMATS[spec.trial.trainer or "builtin"][0]


def unmeasured_note(fmt: str, spec: CampaignSpec) -> str | None:
    """A line to show with a launch file for a program the campaign did not measure."""
    trainer = spec.trial.trainer or "builtin"
    if fmt in OWN_FORMATS[trainer]:
        return None
    return (f"note: campaign {spec.name!r} measured trainer {trainer}; this {fmt} file runs "
            f"another program with its winner's layout, unmeasured (its own: --format "
            f"{own_format(spec)})")


def _origin(spec: CampaignSpec, trial_id: str, config: ParallelConfig,
            tool: str = BUILTIN_TOOL) -> str:
    """Where the file came from, as one line of printable text: it goes into `#` comments, so
    no name may end the comment line (the spec refuses such names; this holds regardless)."""
    text = (
        f"ParaTune campaign {spec.name!r}, trial {trial_id} ({config.key()}); "
        f"model {spec.model.name!r}, {spec.world_size} ranks on {spec.cluster.name!r}; "
        f"written for {tool}"
    )
    return "".join(c if c.isprintable() else "?" for c in text)


def _env_line(name: str, value: str) -> str:
    if not ENV_NAME.fullmatch(name):  # the spec refuses these; never write one into a script
        raise ValueError(f"trial.env: {name!r} is not an environment variable name")
    return f"export {name}={shlex.quote(value)}"


def _directive(option: str, value: object) -> str:
    """One `#SBATCH --option=value` line; sbatch reads it without a shell, but a line break or
    a quote would still change what it reads (the spec refuses those; this holds regardless)."""
    text = str(value)
    if not SBATCH_OPTION.fullmatch(option) or not SBATCH_VALUE.fullmatch(text):
        raise ValueError(f"#SBATCH --{option}: {text!r} is not one word")
    return f"#SBATCH --{option}={text}"


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
    directives = [("job-name", f"paratune-{spec.name}"), ("nodes", spec.scale.nodes),
                  ("ntasks-per-node", 1), ("time", b.time_limit_min)]
    if spec.cluster.device != "cpu":
        directives.append(("gpus-per-node", spec.gpus_per_node))
    for key in ("partition", "account", "qos", "constraint", "cpus_per_task"):
        if getattr(b, key) is not None:
            directives.append((key.replace("_", "-"), getattr(b, key)))
    directives += list(b.sbatch_args.items())
    lines = "\n".join(_directive(option, value) for option, value in directives)
    setup = "\n".join(b.setup)  # the user's own shell lines, run as written
    env = "\n".join(_env_line(k, v) for k, v in spec.trial.env.items())
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
    own = spec.trial.trainer in ("deepspeed", "megatron-deepspeed")
    base = base_config(spec) if own else None
    data = {"_paratune": _origin(spec, trial_id, config, DeepSpeedTrainer.tool),
            **deepspeed_config(spec, config, base)}
    return json.dumps(data, indent=2) + "\n"


def _export_megatron(tool: str, spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A bash array of `tool`'s model-shape and layout flags, rendered by the code trials run."""
    body = "\n".join(f"  {shlex.quote(a)}" for a in megatron_args(tool, spec, config))
    pair = (" Pair it with `--format deepspeed` saved as ds_config.json."
            if tool == "megatron-deepspeed" else "")
    return (f"# {_origin(spec, trial_id, config, TOOLS[tool].source)}\n"
            f"# {tool} flags.{pair}\n"
            f"# Use: source THIS_FILE; torchrun ... pretrain_gpt.py YOUR_DATA_ARGS "
            f"\"${{MEGATRON_ARGS[@]}}\"\n"
            f"MEGATRON_ARGS=(\n{body}\n)\n")


def export_megatron_lm(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    return _export_megatron("megatron-lm", spec, trial_id, config)


def export_megatron_deepspeed(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    return _export_megatron("megatron-deepspeed", spec, trial_id, config)


def export_torchtitan(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A torchrun script for torchtitan 0.3.0 (which reads no TOML job file): the trial's
    `--module/--config`, the user's overrides and the layout's, as trials ran them less their
    own steps, log frequency and output folder."""
    args = torchtitan_args(spec, config, export_values(spec, config, trial_id))
    body = "\n".join(f"  {shlex.quote(a)}" for a in args)
    entry = shlex.quote(torchtitan_section(spec).entry)
    launch = f"--nproc_per_node={spec.gpus_per_node} -m {entry}"
    return f"""#!/usr/bin/env bash
# {_origin(spec, trial_id, config, TORCHTITAN)}
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
    env = "".join(_env_line(k, v) + "\n" for k, v in spec.trial.env.items())
    config_file = ""
    if any("{deepspeed_config}" in item for item in spec.trial.command):
        text = json.dumps(deepspeed_config(spec, config), indent=2)
        config_file = (f"cat > \"$RUN_DIR\"/{DEEPSPEED_CONFIG_FILE} <<'{CONFIG_END}'\n"
                       f"{text}\n{CONFIG_END}\n")
    workdir = spec.trial.workdir
    cd = f"cd {shlex.quote(workdir)}\n" if workdir else ""
    tool = "the campaign's own trial.command"
    return f"""#!/usr/bin/env bash
# {_origin(spec, trial_id, config, tool)}
# {{steps}} is the campaign's trial.steps ({spec.trial.steps}): change it for a long run.
set -euo pipefail
mkdir -p "${{RUN_DIR:=paratune-run}}"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
{config_file}{cd}{env}exec {words}
"""


EXPORTERS = {"yaml": export_yaml, "torchrun": export_torchrun, "sbatch": export_sbatch,
             "deepspeed": export_deepspeed, "megatron-lm": export_megatron_lm,
             "megatron-deepspeed": export_megatron_deepspeed,
             "megatron": export_megatron_deepspeed, "torchtitan": export_torchtitan,
             "command": export_command}


def export(fmt: str, spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    if fmt not in EXPORTERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return EXPORTERS[fmt](spec, trial_id, config)
