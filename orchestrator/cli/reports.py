"""`paratune report` (the campaign's HTML report, also logged to MLflow) and `paratune ui`
(the MLflow UI over the campaign's tracking store, on 127.0.0.1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from dashboards.report import render
from dashboards.report_data import report_data
from orchestrator.campaign import CampaignView
from orchestrator.cli.common import RUNS_DIR_OPTION, console, open_campaign, out
from orchestrator.errors import UserError
from orchestrator.paths import default_tracking_uri, runs_root
from orchestrator.tracking import Tracker


def report(
    campaign: str = typer.Argument(..., help="campaign name"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="default: runs/<name>/report.html"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
) -> None:
    """Write the campaign's self-contained HTML report and log it to MLflow."""
    view = open_campaign(campaign, runs_dir)
    path = output or view.dir / "report.html"
    path.write_text(render(report_data(view)))
    out.print(f"wrote {path}")
    _log_to_mlflow(view, path)


def _log_to_mlflow(view: CampaignView, path: Path) -> None:
    spec = view.spec
    if not spec.tracking.enabled:
        return
    parent = view.parent_run_id()
    try:
        tracker = Tracker(spec.tracking_uri(), f"paratune/{spec.name}",
                          artifact_root=spec.runs_dir() / "mlartifacts")
        if parent:
            tracker.client.log_artifact(parent, str(path))
    except Exception as exc:  # the report is written; MLflow is a mirror
        console.print(f"note: MLflow did not take the report ({exc})", markup=False)


def ui(
    campaign: Optional[str] = typer.Argument(None, help="any campaign of the store (for its URI)"),
    port: int = typer.Option(5000, "--port", help="1 to 65535"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
) -> None:
    """Serve the MLflow UI over the campaigns' tracking store on 127.0.0.1."""
    if not 1 <= port <= 65535:  # before anything opens the store
        raise UserError(f"--port: {port} is not a TCP port; give 1 to 65535")
    root = runs_root(runs_dir)
    uri = open_campaign(campaign, root).spec.tracking_uri() if campaign else default_tracking_uri(root)
    if uri.startswith(("http://", "https://")):
        raise UserError(f"the campaigns track to the server {uri}; open it in a browser")
    console.print(f"MLflow UI for {uri}: http://127.0.0.1:{port}  (Ctrl-C stops it)", markup=False)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # Become the server (same PID), so whoever started `paratune ui` can stop it by that PID.
    os.execve(sys.executable, [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(port)], env)
