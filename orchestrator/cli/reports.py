"""`paratune report` (the campaign's HTML report, also logged to MLflow) and `paratune ui`
(the MLflow UI over the campaign's tracking store, on 127.0.0.1, with a link to each campaign's
trial table)."""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

import typer

from dashboards.report import render
from dashboards.report_data import report_data
from orchestrator.cli.campaigns import which_campaign
from orchestrator.cli.common import (
    RUNS_DIR_OPTION,
    console,
    open_campaign,
    out,
    write_output,
)
from orchestrator.common.errors import UserError
from orchestrator.common.objective import Objective
from orchestrator.common.paths import default_tracking_uri, runs_root
from orchestrator.record.campaign import CampaignView
from orchestrator.campaign_spec import load_campaign_spec
from orchestrator.tracking.mirror import Tracker
from orchestrator.tracking.view import VIEW_TAG, trials_link

REPORT_FILE = "report.html"  # the report's default place, in the campaign's folder
UI_LOG = "mlflow-ui.log"  # the MLflow server's output under `paratune ui`


def report(
    campaign: Optional[str] = typer.Argument(None, help="campaign name (the start of one: the "
                                             "latest of them); the latest campaign if omitted"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="default: runs/<name>/report.html"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
) -> None:
    """Write the campaign's self-contained HTML report and log it to MLflow."""
    campaign = which_campaign(campaign, runs_dir)
    view = open_campaign(campaign, runs_dir)
    path = output or view.dir / REPORT_FILE
    write_output(path, render(report_data(view)), "-o", campaign_dir=view.dir,
                 own_file=REPORT_FILE)
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
    campaign: Optional[str] = typer.Argument(None, help="a campaign (the start of one: the latest "
                                             "of them; default: every campaign of the store)"),
    port: int = typer.Option(5000, "--port", help="1 to 65535"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
) -> None:
    """Serve the MLflow UI over the campaigns' tracking store on 127.0.0.1 and print the link
    that opens each campaign's trials, sorted by its objective."""
    if not 1 <= port <= 65535:  # before anything opens the store
        raise UserError(f"--port: {port} is not a TCP port; give 1 to 65535")
    root = runs_root(runs_dir)
    campaign = campaign and which_campaign(campaign, root)
    uri = open_campaign(campaign, root).spec.tracking_uri() if campaign else default_tracking_uri(root)
    if uri.startswith(("http://", "https://")):
        raise UserError(f"the campaigns track to the server {uri}; open it in a browser")
    server = f"http://127.0.0.1:{port}"
    try:
        links = trial_links(uri, root, server, campaign)
    except Exception as exc:  # the UI is still worth serving
        links = []
        console.print(f"note: could not read the MLflow store ({exc})", markup=False)
    if campaign and not links:
        console.print(f"note: campaign {campaign!r} has no MLflow experiment yet", markup=False)
    log = ui_log(root, campaign)
    console.print(f"starting the MLflow UI for {uri} on {server} (its messages go to {log}); "
                  "the link follows once it answers (Ctrl-C stops it)", markup=False,
                  soft_wrap=True)
    sys.stdout.flush()
    sys.stderr.flush()
    announce_when_up(server, [("MLflow UI", server), *links])
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    to_log(log)
    # Become the server (same PID), so whoever started `paratune ui` can stop it by that PID.
    os.execve(sys.executable, [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(port)], env)


def ui_log(root: Path, campaign: str | None) -> Path:
    """Where the MLflow server's own output goes: the campaign's folder, or the runs
    directory for the whole store."""
    folder = root / campaign if campaign and (root / campaign).is_dir() else root
    folder.mkdir(parents=True, exist_ok=True)
    return folder / UI_LOG


def to_log(path: Path) -> None:
    """Send this process's stdout and stderr to `path` (appended): uvicorn's and Starlette's
    start-up lines and deprecation warnings would otherwise bury the link on the terminal."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def announce_when_up(server: str, links: list[tuple[str, str]], limit_s: float = 600) -> None:
    """Print `links` once `server` answers, from a watcher process of its own (twice forked,
    so the server this process becomes never has to reap it): a link printed earlier opens
    on "connection refused" for the minute MLflow takes to start."""
    if os.fork() != 0:
        os.wait()  # the first child leaves at once; its child is the watcher
        return
    if os.fork() != 0:
        os._exit(0)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{server}/health", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        os._exit(1)
    # Plain lines on stdout, a campaign's trial table last: a terminal must not wrap the URL.
    for name, link in links:
        sys.stdout.write(f"{name}: {link}\n")
    sys.stdout.flush()
    os._exit(0)


def trial_links(uri: str, root: Path, server: str, campaign: str | None) -> list[tuple[str, str]]:
    """(campaign, link to its trial table on `server`) for `campaign`, or for every campaign
    experiment in the store. Experiments of campaigns found under `root` get the experiment
    kind and the saved trial view first, so campaigns tracked before them open the same way."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    if campaign:
        found = [client.get_experiment_by_name(f"paratune/{campaign}")]
    else:
        found = client.search_experiments(filter_string="name LIKE 'paratune/%'", max_results=1000)
    links = []
    for experiment in sorted((e for e in found if e is not None), key=lambda e: e.name):
        name = experiment.name.removeprefix("paratune/")
        try:
            objective = Objective.of(load_campaign_spec(root, name).objective)
        except UserError:  # its folder is gone (or unreadable): link what the store has
            objective = None
        if objective is not None:
            Tracker(uri, experiment.name, objective=objective)
        has_view = objective is not None or VIEW_TAG in experiment.tags
        links.append((name, trials_link(server, experiment.experiment_id, view=has_view)))
    return links
