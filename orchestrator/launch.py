"""What the built-in trial job is given for one config: its settings and its launch command.

Shared by the controller (to run trials) and by export (to write launch files that rerun a
winner without ParaTune), so both always agree.
"""

from __future__ import annotations

from typing import Any

from orchestrator.search_spaces import ParallelConfig
from orchestrator.spec import CampaignSpec


def job_settings(spec: CampaignSpec, config: ParallelConfig, trial_id: str) -> dict[str, Any]:
    """The built-in trial job's settings (see jobs/config.py) for one config."""
    return {
        "model": spec.model.model_dump(exclude={"name"}),
        **{k: v for k, v in config.to_params().items() if v is not None},
        "steps": spec.trial.steps,
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
