"""The `TrialRequest` for one trial of a campaign: everything a backend needs to run it (the
trainer's program for the layout, its files, how to read its result), so no backend reads the
spec."""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends import TrialRequest
from orchestrator.costmodel import CostModel
from orchestrator.record.journal import SCREEN, TrialRecord
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers import Measure, trainer_for
from orchestrator.trial.folder import TrialFolder


def measure_for(spec: CampaignSpec, layout: Layout, cost_model: CostModel) -> Measure:
    estimate = cost_model.estimate(layout)
    return Measure(world_size=layout.world_size, seq_len=spec.model.seq_len,
                   tokens_per_step=estimate.tokens_per_step,
                   model_flops_per_step=estimate.model_flops_per_step,
                   peak_tflops=spec.cluster.peak_tflops, warmup_steps=spec.trial.warmup_steps)


def trial_request(spec: CampaignSpec, record: TrialRecord, campaign_dir: Path,
                  workdir: str | None, cost_model: CostModel) -> TrialRequest:
    folder = TrialFolder.of(campaign_dir, record.trial_id)
    steps = spec.search.fidelity.screening_steps if record.phase == SCREEN else spec.trial.steps
    trainer = trainer_for(spec)
    return TrialRequest(
        trial_id=record.trial_id, config=record.config, folder=folder, trainer=trainer,
        run=trainer.run(spec, record.config, record.trial_id, folder, steps),
        measure=measure_for(spec, record.config, cost_model), steps=steps,
        timeout_s=spec.trial.timeout_s, env=dict(spec.trial.env), workdir=workdir,
    )
