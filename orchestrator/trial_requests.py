"""The `TrialRequest` for one trial of a campaign: everything a backend needs to run it, so no
backend reads the spec."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.backends import TrialRequest
from orchestrator.journal import SCREEN, TrialRecord
from orchestrator.spec import CampaignSpec
from orchestrator.trial_folder import DEEPSPEED_CONFIG_FILE, TrialFolder
from orchestrator.trial_inputs import command_argv, deepspeed_config, job_settings


def trial_request(spec: CampaignSpec, record: TrialRecord, campaign_dir: Path,
                  workdir: str | None) -> TrialRequest:
    folder = TrialFolder.of(campaign_dir, record.trial_id)
    settings = job_settings(spec, record.config, record.trial_id)
    if record.phase == SCREEN:
        settings["steps"] = spec.search.fidelity.screening_steps
    command, files = None, {}
    if spec.trial.command:
        command = command_argv(spec, record.config, record.trial_id, str(folder.path))
        files[DEEPSPEED_CONFIG_FILE] = json.dumps(deepspeed_config(spec, record.config))
    return TrialRequest(
        trial_id=record.trial_id, config=record.config, folder=folder, job_settings=settings,
        steps=settings["steps"], timeout_s=spec.trial.timeout_s, env=dict(spec.trial.env),
        command=command, workdir=workdir, files=files,
    )
