"""Launch files for a campaign's winner, to be reused as they are by production runs.

Formats: `yaml` (the built-in trainer's config, `python -m jobs.train --config FILE`) and
`torchrun` (a shell script). Each names the campaign and trial it came from.
"""

from __future__ import annotations

import shlex

import yaml

from orchestrator.launch import job_flags, job_settings
from orchestrator.search_spaces import ParallelConfig
from orchestrator.spec import CampaignSpec

FORMATS = ("yaml", "torchrun")


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


def export_torchrun(spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    """A script for one node (--standalone) or, with NNODES/NODE_RANK/MASTER_ADDR set, many."""
    pairs = job_flags(job_settings(spec, config, trial_id))
    flags = " \\\n    ".join(shlex.join(pairs[i:i + 2]) for i in range(0, len(pairs), 2))
    nodes = spec.scale.nodes
    return f"""#!/usr/bin/env bash
# {_origin(spec, trial_id, config)}
set -euo pipefail
NNODES=${{NNODES:-{nodes}}}
if [ "$NNODES" -gt 1 ]; then
  RDZV=(--nnodes="$NNODES" --node_rank="${{NODE_RANK:?set NODE_RANK}}" --rdzv_backend=c10d \\
        --rdzv_endpoint="${{MASTER_ADDR:?set MASTER_ADDR}}:${{MASTER_PORT:-29500}}")
else
  RDZV=(--standalone)
fi
exec torchrun "${{RDZV[@]}}" --nproc_per_node={spec.gpus_per_node} -m jobs.train \\
    {flags} "$@"
"""


def export(fmt: str, spec: CampaignSpec, trial_id: str, config: ParallelConfig) -> str:
    if fmt == "yaml":
        return export_yaml(spec, trial_id, config)
    if fmt == "torchrun":
        return export_torchrun(spec, trial_id, config)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
