"""MLflow keeps a slice campaign's two scales apart: each trial's run says its phase (`target`
for a full-scale one), and the campaign's run holds the slice's and the target's figures."""

from __future__ import annotations

from conftest import EXAMPLES

from orchestrator.campaign_spec import load_spec


def test_the_campaign_run_holds_both_scales(tmp_path):
    import mlflow

    from orchestrator.record.campaign import CampaignView
    from orchestrator.record.journal import TARGET
    from orchestrator.scheduling.controller import Controller

    runs = tmp_path / "runs"
    spec = load_spec(EXAMPLES / "frontier-175b.yaml", [
        "name=tracked-slice", f"tracking.runs_dir={runs}", "search.algorithm=cost-guided",
        "scale.slice_nodes=16", "budget.max_trials=4", "backend.seed=1"])
    Controller(spec).run()
    records = CampaignView.open(runs, "tracked-slice").records()
    target = {r.trial_id for r in records if r.phase == TARGET}
    assert target
    client = mlflow.MlflowClient(tracking_uri=spec.tracking_uri())
    experiment = client.get_experiment_by_name("paratune/tracked-slice")
    found = client.search_runs([experiment.experiment_id])
    phases = {r.info.run_name.split()[0]: r.data.params.get("fidelity") for r in found
              if r.info.run_name and r.info.run_name.startswith("t0")}
    assert {t for t, phase in phases.items() if phase == "target"} == target
    campaign = [r for r in found if "slice_gpu_hours_on_slice" in r.data.metrics]
    assert len(campaign) == 1
    metrics = campaign[0].data.metrics
    assert metrics["slice_slice_nodes"] == 16 and metrics["slice_target_nodes"] == 128
    assert metrics["slice_measured_at_target"] > 0
