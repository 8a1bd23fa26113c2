"""The built-in trainer's (`jobs/`) settings for a layout, and the same settings as command-line
flags.

Shared by the scheduling loop (to run trials) and by export (to write launch files that rerun
a winner without ParaTune), so both always agree.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.base import TrainerRun
from orchestrator.trial.folder import SETTINGS_FILE, TrialFolder


def job_settings(spec: CampaignSpec, layout: Layout, trial_id: str,
                 steps: int | None = None) -> dict[str, Any]:
    """The built-in trial job's settings (see jobs/config.py) for one config."""
    return {
        "model": spec.model.model_dump(exclude={"name"}),
        **{k: v for k, v in layout.to_params().items() if v is not None},
        "steps": steps or spec.trial.steps,
        "warmup_steps": spec.trial.warmup_steps,
        "peak_tflops": spec.cluster.peak_tflops,
        "trial_id": trial_id,
    }


def job_flags(settings: dict[str, Any]) -> list[str]:
    """Command-line flags of `python -m jobs.train` equivalent to a settings dict."""
    flags: list[str] = []
    items = list(settings.get("model", {}).items()) + [
        (k, v) for k, v in settings.items() if k not in ("model", "result_file")
    ]
    for key, value in items:
        if value is not None:
            flags += ["--" + key.replace("_", "-"), str(value)]
    return flags


def builtin_run(folder: TrialFolder, settings: dict[str, Any]) -> TrainerRun:
    """The built-in job with these settings, its result written into the trial folder."""
    settings = {**settings, "result_file": str(folder.result_file)}
    return TrainerRun(program=["-m", "jobs.train", "--config", str(folder.settings_file)],
                      launcher="rank-env", files={SETTINGS_FILE: json.dumps(settings, indent=2)})
