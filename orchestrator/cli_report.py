"""`paratune report` (the campaign's HTML report, also logged to MLflow) and `paratune ui`
(the MLflow UI over the campaign's tracking store, on 127.0.0.1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli import _runs_dir, app, console, out
from orchestrator.errors import UserError


def report_data(spec, records, calibration=None):
    """Everything the report shows, from the journal and the cost model."""
    from dashboards.report import ReportData, TrialRow
    from orchestrator.budget import gpu_hours
    from orchestrator.controller import best_record
    from orchestrator.costmodel import cost_model_for
    from orchestrator.export import export
    from orchestrator.scaling import efficiency

    metric, mode = spec.objective.metric, spec.objective.mode
    model = calibration.model if calibration else cost_model_for(spec)

    def row(r) -> TrialRow:
        value = r.result.metric(metric) if r.result else None
        predicted = None
        if r.result and r.result.status != "infeasible":
            est = model.estimate(r.config)
            predicted = getattr(est, metric, None) if metric != "tokens_per_s_per_gpu" else \
                est.tokens_per_s / r.config.world_size
        return TrialRow(r.trial_id, r.config.to_params(), r.config.key(),
                        r.result.status if r.result else "running", r.fidelity, value, predicted,
                        gpu_hours(r), r.result.error if r.result else None)

    rows = [row(r) for r in records]
    best = best_record(records, metric, mode)
    best_row = next((t for t in rows if best and t.trial_id == best.trial_id), None)
    launch = export("torchrun", spec, best.trial_id, best.config) if best else ""
    ranked = sorted((r for r in records if r.result and r.result.ok and r.result.metric(metric)
                     and r.fidelity != "scaling"),
                    key=lambda r: r.result.metric(metric), reverse=mode == "max")[:5]
    memory_top = [(r.config.key(), model.estimate(r.config).memory.as_gb()) for r in ranked]
    scaling = efficiency(records, spec.scale.study, spec.gpus_per_node, metric) if spec.scale.study else []
    return ReportData(
        campaign=spec.name, metric=metric, mode=mode, model=spec.model.name,
        cluster=spec.cluster.name, world_size=spec.world_size, trials=rows, best=best_row,
        launch_command=launch, memory_top=memory_top, scaling=scaling,
        scaling_study=spec.scale.study,
        calibration=calibration.to_dict() if calibration else None,
    )


@app.command()
def report(
    campaign: str = typer.Argument(..., help="campaign name"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="default: runs/<name>/report.html"),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir"),
) -> None:
    """Write the campaign's self-contained HTML report and log it to MLflow."""
    from dashboards.report import render
    from orchestrator.controller import Controller, load_campaign_spec
    from orchestrator.costmodel import calibrate, cost_model_for

    spec = load_campaign_spec(_runs_dir(runs_dir), campaign)
    controller = Controller(spec)
    records = controller.summary().records
    fit = calibrate(cost_model_for(spec), [(r.trial_id, r.config, r.result) for r in records
                                          if r.result is not None and r.fidelity != "scaling"])
    path = output or controller.dir / "report.html"
    path.write_text(render(report_data(spec, records, fit)))
    out.print(f"wrote {path}")
    _log_to_mlflow(spec, controller, path)


def _log_to_mlflow(spec, controller, path: Path) -> None:
    if not spec.tracking.enabled:
        return
    parent = controller.journal.campaign_info().get("parent_run_id")
    try:
        from orchestrator.tracking import Tracker

        tracker = Tracker(spec.tracking_uri(), f"paratune/{spec.name}",
                          artifact_root=spec.runs_dir() / "mlartifacts")
        if parent:
            tracker.client.log_artifact(parent, str(path))
    except Exception as exc:  # the report is written; MLflow is a mirror
        console.print(f"note: MLflow did not take the report ({exc})", markup=False)


@app.command()
def ui(
    campaign: Optional[str] = typer.Argument(None, help="any campaign of the store (for its URI)"),
    port: int = typer.Option(5000, "--port"),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir"),
) -> None:
    """Serve the MLflow UI over the campaigns' tracking store on 127.0.0.1."""
    root = _runs_dir(runs_dir)
    if campaign:
        from orchestrator.controller import load_campaign_spec

        uri = load_campaign_spec(root, campaign).tracking_uri()
    else:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root / 'mlflow.db').resolve()}"
    if uri.startswith(("http://", "https://")):
        raise UserError(f"the campaigns track to the server {uri}; open it in a browser")
    console.print(f"MLflow UI for {uri}: http://127.0.0.1:{port}  (Ctrl-C stops it)", markup=False)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # Become the server (same PID), so whoever started `paratune ui` can stop it by that PID.
    os.execve(sys.executable, [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(port)], env)
