"""The `megatron-lm` and `megatron-deepspeed` launch files: a bash array of the tool's model-shape
and layout flags, rendered by the code trials run (`megatron` is the old name of the second)."""

from __future__ import annotations

import shlex

from orchestrator.common.errors import SpecError
from orchestrator.export.common import origin
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.megatron.args import DS, TOOLS, megatron_args


def export_megatron(tool: str, spec: CampaignSpec, trial_id: str, layout: Layout) -> str:
    """A bash array of `tool`'s model-shape and layout flags, rendered by the code trials run."""
    try:
        args = megatron_args(tool, spec, layout)
    except SpecError as exc:  # a layout the tool cannot express: say so of the export
        raise SpecError(f"--format {tool}: the winner {layout.key()} cannot be written for "
                        f"{tool} ({exc})") from None
    body = "\n".join(f"  {shlex.quote(a)}" for a in args)
    pair = (" Pair it with `--format deepspeed` saved as ds_config.json."
            if tool == DS else "")
    return (f"# {origin(spec, trial_id, layout, TOOLS[tool].source)}\n"
            f"# {tool} flags.{pair}\n"
            f"# Use: source THIS_FILE; torchrun ... pretrain_gpt.py YOUR_DATA_ARGS "
            f"\"${{MEGATRON_ARGS[@]}}\"\n"
            f"MEGATRON_ARGS=(\n{body}\n)\n")
