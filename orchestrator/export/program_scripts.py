"""Launch scripts of the program a campaign measured when that is not the built-in trainer
(a DeepSpeed or Megatron script, torchtitan, a `trial.command`): the trainer's own argv as the
winner ran it (program.py), in the folder the trials ran in, with their environment and the
files it reads written into $RUN_DIR first.

A torchrun-launched program runs under torchrun (one node, or many with NNODES/NODE_RANK/
MASTER_ADDR) or, for `sbatch`, one torchrun per node under srun; a program that starts its own
ranks (a `trial.command`) runs once, as its trials did.
"""

from __future__ import annotations

from orchestrator.export.common import env_line, interpreter, origin, run_context
from orchestrator.export.program import (
    ExportedProgram,
    exported_program,
    length_note,
    measurement_note,
    paired,
    uses_run_dir,
    write_files,
)
from orchestrator.export.scripts import SRUN_TORCHRUN, rendezvous, sbatch_lines, sbatch_setup
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers import trainer_for

CONTINUED = " \\\n    "


def _tool(spec: CampaignSpec) -> str:
    if spec.trial.command is not None:
        return "the campaign's own trial.command"
    return trainer_for(spec).tool


def _prelude(spec: CampaignSpec, program: ExportedProgram) -> str:
    """The trials' Python, the run folder and its files (where the program uses one), the
    trials' folder and environment, the trainer's own."""
    env = "".join(env_line(k, v) + "\n" for k, v in program.env.items()
                  if k not in spec.trial.env)
    run_dir = write_files(program.files) if uses_run_dir(program) else ""
    return interpreter() + run_dir + run_context(spec) + env


def _launch(spec: CampaignSpec, program: ExportedProgram) -> str:
    """The last line: torchrun over the argv, or the argv as it is."""
    words = CONTINUED.join(paired(program.words))
    if program.launcher == "self":
        return f"exec {words}"
    return (f'exec "$PYTHON" -m torch.distributed.run "${{RDZV[@]}}" '
            f'--nproc_per_node={spec.gpus_per_node}{CONTINUED}{words}')


def export_program_torchrun(spec: CampaignSpec, trial_id: str, layout: Layout,
                            trial_dir=None) -> str:
    program = exported_program(spec, trial_id, layout, trial_dir)
    nodes = "" if program.launcher == "self" else rendezvous(spec.scale.nodes) + "\n"
    return f"""#!/usr/bin/env bash
# {origin(spec, trial_id, layout, _tool(spec))}
{length_note(spec, program.length_args)}{measurement_note(program.measurement_args)}set -euo pipefail
{_prelude(spec, program)}{nodes}{_launch(spec, program)}
"""


def export_program_sbatch(spec: CampaignSpec, trial_id: str, layout: Layout,
                          trial_dir=None) -> str:
    """The program under Slurm: one torchrun per node, or once from the batch script; its
    $RUN_DIR must be on a filesystem every node sees."""
    program = exported_program(spec, trial_id, layout, trial_dir)
    if program.launcher == "self":
        launch = _launch(spec, program)
    else:
        words = CONTINUED.join(paired(program.words))
        launch = f"""MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
{SRUN_TORCHRUN.format(gpus=spec.gpus_per_node)} "$@"' "$PYTHON"{CONTINUED}{words}"""
    return f"""#!/bin/bash
{sbatch_lines(spec)}# {origin(spec, trial_id, layout, _tool(spec))}
{length_note(spec, program.length_args)}{measurement_note(program.measurement_args)}set -euo pipefail
{sbatch_setup(spec)}{_prelude(spec, program)}{launch}
"""

