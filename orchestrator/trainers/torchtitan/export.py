"""The `torchtitan` launch file: a torchrun script of torchtitan 0.3.0's arguments, as trials ran
them, run where the trials ran with their environment."""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestrator.export.common import interpreter, origin, run_context
from orchestrator.export.scripts import rendezvous
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.torchtitan.args import (
    TOOL,
    export_values,
    torchtitan_args,
    torchtitan_section,
)


def export_torchtitan(spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    """A torchrun script for torchtitan 0.3.0 (which reads no TOML job file): the trial's
    `--module/--config`, the user's overrides and the layout's, as trials ran them less their
    own steps, log frequency and output folder."""
    args = torchtitan_args(spec, layout, export_values(spec, layout, trial_id))
    body = "\n".join(f"  {shlex.quote(a)}" for a in args)
    entry = shlex.quote(torchtitan_section(spec).entry)
    launch = f"--nproc_per_node={spec.gpus_per_node} -m {entry}"
    return f"""#!/usr/bin/env bash
# {origin(spec, trial_id, layout, TOOL)}
# The layout's flags come after the overrides (the layout wins); torchtitan derives gradient
# accumulation as global_batch_size / (local_batch_size x data-parallel degree). Add flags to
# ARGS before the activation-checkpoint subcommand: arguments after it belong to it.
set -euo pipefail
{interpreter()}{run_context(spec)}{_converter_path(layout)}{rendezvous(spec.scale.nodes)}
ARGS=(
{body}
)
exec "$PYTHON" -m torch.distributed.run "${{RDZV[@]}}" {launch} "${{ARGS[@]}}"
"""


def _converter_path(layout: Layout) -> str:
    """An FP8 layout's --module is ParaTune's config registry, which attaches torchtitan's own
    converters: the script puts ParaTune on PYTHONPATH (PARATUNE_ROOT, or this checkout)."""
    if layout.precision == "bf16":
        return ""
    root = str(Path(__file__).resolve().parents[3])
    for special in ("\\", '"', "$", "`", "}"):  # inside the double quotes below
        root = root.replace(special, "\\" + special)
    return ("# FP8: --module names ParaTune's registry of torchtitan configs with its converters.\n"
            f'export PYTHONPATH="${{PARATUNE_ROOT:-{root}}}${{PYTHONPATH:+:$PYTHONPATH}}"\n')
