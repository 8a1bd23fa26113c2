"""The `deepspeed` launch file: the DeepSpeed config the winner ran, for a production run."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.export.common import origin
from orchestrator.export.program import winner_deepspeed_config
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.deepspeed.config import TOOL, base_config, deepspeed_config
from orchestrator.trainers.registry import trainer_for


def export_deepspeed(spec: CampaignSpec, trial_id: str, layout: Layout,
                     trial_dir: Path | None = None) -> str:
    """The DeepSpeed config the winning trial ran (its folder's copy) when the campaign ran
    one, else the layout's on the campaign's base config as it reads now; for a production
    run, without the keys only a trial needs."""
    own = "deepspeed" in trainer_for(spec).export_formats  # its trials ran a DeepSpeed config
    data = winner_deepspeed_config(
        spec, trial_dir if own else None,
        lambda: deepspeed_config(spec, layout, base_config(spec) if own else None))
    data = {"_paratune": origin(spec, trial_id, layout, TOOL),
            **{k: v for k, v in data.items() if k != "_paratune"}}
    return json.dumps(data, indent=2) + "\n"
