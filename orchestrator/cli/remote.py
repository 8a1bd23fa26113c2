"""The commands that work through the campaign service: `submit`, `ls`, `cancel`, `logs`, and
`status` and `best`, which read the local runs directory unless a server is given (`--server`
or $PARATUNE_SERVER). `cancel` without a server cancels a campaign of the local runs directory.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli import campaign_status, campaign_table, campaigns
from orchestrator.cli.common import (
    RUNS_DIR_OPTION,
    console,
    deliver_launch_file,
    out,
    print_json,
)
from orchestrator.cli.service_client import (
    FINAL_STATES,
    SERVER_OPTION,
    TOKEN_OPTION,
    connect,
    server_url,
)
from orchestrator.common.bounded_files import UnreadableFile, read_bounded
from orchestrator.common.errors import UserError
from orchestrator.export import formats
from orchestrator.server.submission import SOURCE
from orchestrator.campaign_spec.yaml_input import MAX_BYTES

FOLLOW_POLL_S = 0.5


def _server(flag: Optional[str], command: str, local: str) -> str:
    url = server_url(flag)
    if url is None:
        raise UserError(f"{command} needs a campaign service: give --server URL or set "
                        f"$PARATUNE_SERVER ({local})")
    return url


def _server_or_local(flag: Optional[str], runs_dir: Optional[Path]) -> Optional[str]:
    """The server to ask, or None for the local runs directory: an explicit --runs-dir wins
    over $PARATUNE_SERVER, and cannot go with an explicit --server."""
    if runs_dir is not None:
        if flag:
            raise UserError("--runs-dir reads a local runs directory and --server asks a "
                            "server; give one of them")
        return None
    return server_url(flag)


# ---------------------------------------------------------------------------------- submit


def submit(
    spec_file: Path = typer.Argument(..., help="campaign YAML"),
    set_: list[str] = typer.Option([], "--set", help="override a key: a.b=value (repeatable)"),
    priority: int = typer.Option(0, "--priority", help="higher starts first (-1000 to 1000)"),
    project: Optional[str] = typer.Option(None, "--project",
                                          help="the project whose GPU-hour quota it uses"),
    as_json: bool = typer.Option(False, "--json", help="print the campaign object"),
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Queue a campaign on the service; prints its name and returns at once."""
    url = _server(server, "submit", "`paratune run SPEC` runs a campaign here")
    try:  # a FIFO or a device is refused, never waited on
        text = read_bounded(spec_file, MAX_BYTES, follow_links=True).decode()
    except UnreadableFile as exc:
        if exc.missing:
            raise UserError(f"{spec_file}: no such file; give the path of a campaign "
                            "YAML") from None
        raise UserError(f"{exc}; give a campaign YAML file") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{spec_file}: cannot read it ({exc.__class__.__name__}); give a "
                        "campaign YAML file") from None
    with connect(url, token) as client:
        try:
            campaign = client.submit(text, list(set_), priority, project, os.getcwd())
        except UserError as exc:  # the server names the spec as SOURCE; the user knows a file
            message = str(exc)
            if message.startswith(SOURCE):
                raise UserError(f"{spec_file}{message[len(SOURCE):]}") from None
            raise
    if as_json:
        print_json(campaign)
        return
    sys.stdout.write(f"{campaign['name']}\n")
    sys.stdout.flush()
    for note in campaign.get("notes") or ():  # a server before notes sends none
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"queued on {url}; follow it with `paratune logs {campaign['name']} --follow`",
                  markup=False, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------------- ls


def ls(
    as_json: bool = typer.Option(False, "--json", help='print {"campaigns": [...]}'),
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """The service's campaigns: state, progress, GPU-hours and best so far."""
    url = _server(server, "ls", "`paratune status` lists the local runs directory")
    with connect(url, token) as client:
        found = client.campaigns()
    if as_json:
        print_json({"campaigns": found})
        return
    if not found:
        console.print(f"no campaigns on {url}; queue one with `paratune submit SPEC`",
                      markup=False, highlight=False)
        return
    campaign_table.print_table(out, found)


# ---------------------------------------------------------------------------------- cancel


def cancel(
    campaign: str = typer.Argument(..., help="campaign name"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print the campaign object (server)"),
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Cancel a campaign: its running trials are stopped, finished ones are kept."""
    url = _server_or_local(server, runs_dir)
    if url is None:
        campaigns.cancel_local(campaign, runs_dir)
        return
    with connect(url, token) as client:
        ended = client.campaign(campaign).get("state") in FINAL_STATES
        found = client.cancel(campaign)  # the server says who may, ended or not
    if as_json:
        print_json(found)
    elif ended:
        console.print(f"{campaign} is already {found.get('state')}; nothing to cancel",
                      markup=False, highlight=False)
    elif found.get("state") == "cancelled":
        console.print(f"{campaign}: cancelled", markup=False, highlight=False)
    elif found.get("cancel_requested") and found.get("state") == "running":
        console.print(f"{campaign}: cancelling; its trials are being stopped (see `paratune "
                      f"status {campaign}`)", markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(f"{campaign}: {found.get('state')}", markup=False, highlight=False)


# ---------------------------------------------------------------------------------- logs


def logs(
    campaign: str = typer.Argument(..., help="campaign name"),
    follow: bool = typer.Option(False, "--follow", "-f",
                                help="keep printing until the campaign has ended"),
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """The campaign controller's log on the service."""
    url = _server(server, "logs", "a campaign run here shows its progress in its own terminal")
    with connect(url, token) as client:
        offset = 0
        try:
            while True:
                chunk = client.logs(campaign, offset)
                if chunk.text:
                    sys.stdout.write(chunk.text)
                    sys.stdout.flush()
                drained = chunk.offset == offset
                offset = chunk.offset
                if drained and (not follow or chunk.state in FINAL_STATES):
                    return
                if drained:
                    time.sleep(FOLLOW_POLL_S)
        except KeyboardInterrupt:  # stop following; the campaign goes on
            return


# ---------------------------------------------------------------------------------- results


def status(
    campaign: Optional[str] = typer.Argument(None, help="campaign name (the start of one: the "
                                             "latest of them); all campaigns if omitted"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
    as_json: bool = typer.Option(False, "--json"),
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Trials done / running / failed, and the best so far."""
    url = _server_or_local(server, runs_dir)
    if url is None:
        campaign_status.status(campaign, runs_dir, as_json)
        return
    with connect(url, token) as client:
        found = [client.campaign(campaign)] if campaign else client.campaigns()
    if as_json:
        print_json(found[0] if campaign else {"campaigns": found})
        return
    for c in found:
        for line in campaign_table.status_lines(c):
            out.print(line, highlight=False, soft_wrap=True)


def best(
    campaign: Optional[str] = typer.Argument(None, help="campaign name (the start of one: the "
                                             "latest of them); the latest campaign if omitted"),
    fmt: str = typer.Option("yaml", "--format",
                            help="yaml | torchrun | sbatch | deepspeed | megatron-lm | "
                                 "megatron-deepspeed (megatron: its old name) | torchtitan | "
                                 "command"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write to this file"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
    as_json: bool = typer.Option(False, "--json"),
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """The best configuration, as a launch file."""
    url = _server_or_local(server, runs_dir)
    if url is None:
        campaigns.best(campaign, fmt, output, runs_dir, as_json)
        return
    if fmt not in formats():
        raise UserError(f"--format: unknown format {fmt!r}; choose one of {', '.join(formats())}")
    if campaign is None:
        raise UserError(f"best: name the campaign on {url}; `paratune ls` lists them")
    with connect(url, token) as client:
        text = client.best(campaign, fmt)
        top = client.campaign(campaign).get("best") if as_json else None
    top = top or {}
    deliver_launch_file(text, fmt, output, as_json, {
        "campaign": campaign, "trial_id": top.get("trial_id"), "config": top.get("config"),
        top.get("metric", "value"): top.get("value")})
