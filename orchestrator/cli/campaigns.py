"""`paratune run`, `resume`, `cancel`, `status` and `best`: start, continue and cancel
campaigns, read their results and export the winner. `cancel`, `status` and `best` are
registered through cli.remote, which asks a campaign service instead when one is given.

A controller run here answers signals as the campaign service expects of its children: SIGTERM
detaches (trials run on, `resume` re-attaches them; exit code 143), SIGINT cancels the running
trials (exit code 130). The service's trial slots come from $PARATUNE_SLOTS_URL and
$PARATUNE_SLOTS_TOKEN, which it sets for the controllers it starts."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import (
    RUNS_DIR_OPTION,
    console,
    deliver_launch_file,
    open_campaign,
    out,
    print_ranking,
    print_space_notes,
    rank_spec,
)
from orchestrator.cli.live_display import CampaignProgress
from orchestrator.cli.plan_full_space import run_spec
from orchestrator.cli.resume_lines import extend_hint, say_budget_changes, saying_reattached
from orchestrator.common.errors import CampaignStateError, UserError
from orchestrator.common.paths import runs_root
from orchestrator.common.processes import keep_from_same_user_processes
from orchestrator.export import export, formats, unmeasured_note
from orchestrator.record.budget_change import change_budget
from orchestrator.record.campaign import not_in_mlflow
from orchestrator.record.campaign_choice import choose_campaign
from orchestrator.record.journal import TrialRecord
from orchestrator.record.slice_summary import layout_for_target
from orchestrator.scheduling.controller import Controller
from orchestrator.scheduling.signals import Detached, DetachRequest, Interrupted
from orchestrator.scheduling.slots import NoSlotLimit, ServiceSlots, TrialSlots
from orchestrator.campaign_spec import SPEC_FILE, CampaignSpec, load_campaign_spec
from orchestrator.campaign_spec.planning import fitted_candidates
from orchestrator.campaign_spec.preflight import preflight
from orchestrator.campaign_spec.trial import campaign_inputs

# ---------------------------------------------------------------------------------- run


def mlflow_backlog(spec: CampaignSpec, records: list[TrialRecord]) -> dict | None:
    """How many finished trials MLflow lacks, and the fix; None when tracking is off."""
    if not spec.tracking.enabled:
        return None
    missing = len(not_in_mlflow(records))
    return {"uri": spec.tracking_uri(), "finished": sum(r.done for r in records),
            "not_in_mlflow": missing,
            "fix": f"run `paratune resume {spec.name}` once MLflow is reachable" if missing else None}


def backlog_line(backlog: dict) -> str:
    return (f"{backlog['not_in_mlflow']} of {backlog['finished']} finished trials are not in MLflow "
            f"yet ({backlog['uri']}); their results are safe in the journal: {backlog['fix']}")


def trial_slots() -> TrialSlots:
    """The campaign service's slots when it started this controller (it sets both variables);
    else no limit but the spec's `max_concurrent`."""
    url, token = os.environ.get("PARATUNE_SLOTS_URL"), os.environ.get("PARATUNE_SLOTS_TOKEN")
    if not (url and token):
        return NoSlotLimit()
    keep_from_same_user_processes()  # its trials run as this user: they must not read the token
    return ServiceSlots(url, token)


@contextmanager
def controller_signals(campaign: str) -> Iterator[DetachRequest]:
    """SIGTERM raises `Detached` (once: a second one while leaving is ignored) and records the
    request for the scheduling loop, which leaves at its next turn should the exception have
    been dropped (signals.DetachRequest); SIGINT raises KeyboardInterrupt even where the parent
    started us with it ignored. Main thread only."""
    request = DetachRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def detach(signum, frame) -> None:
        if not request.requested:
            request.requested = True
            raise Detached(campaign)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, detach)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _run_campaign(spec: CampaignSpec, resume: bool) -> None:
    with controller_signals(spec.name) as detach:
        # One-line errors before the progress display and before any file.
        print_space_notes(spec, preflight(spec))
        with CampaignProgress(console, spec) as progress:
            controller = Controller(spec, on_event=saying_reattached(progress),
                                    slots=trial_slots(), detach=detach)
            if resume:
                progress.already_done(controller.view.records())
            try:
                summary = controller.run(resume=resume)
            except KeyboardInterrupt:  # its trials were stopped; a fresh start left nothing
                saved = (controller.dir / SPEC_FILE).exists()
                raise Interrupted(spec.name if saved else None) from None
    progress.print_summary(out, summary)
    if summary.stop_reason:  # why the search ended: the trial budget, or a fix to make
        hint = extend_hint(spec.name, summary.stop_reason)
        console.print(f"stopped: {summary.stop_reason}{hint}", markup=False, highlight=False,
                      soft_wrap=True)
    backlog = mlflow_backlog(spec, summary.records)
    if backlog and backlog["not_in_mlflow"]:  # a warning, not a failure: the journal has them
        console.print(f"warning: {backlog_line(backlog)}", markup=False, highlight=False,
                      soft_wrap=True)


def run(
    spec_file: Path = typer.Argument(..., help="campaign YAML"),
    set_: list[str] = typer.Option([], "--set", help="override a key: a.b=value (repeatable)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the pruned space; run nothing"),
    runs_dir: Optional[Path] = typer.Option(
        None, "--runs-dir", help="where the campaign keeps its state (default: "
        "$PARATUNE_RUNS_DIR, else the spec's tracking.runs_dir)"),
) -> None:
    """Run a campaign to its end."""
    given = [f"tracking.runs_dir={check_runs_dir(runs_dir)}"] if runs_dir else []
    spec = run_spec(spec_file, [*set_, *given])
    if dry_run:
        candidates = fitted_candidates(spec)
        print_space_notes(spec, candidates)
        print_ranking(spec, rank_spec(spec, 10, candidates=candidates))
        return
    _run_campaign(spec, resume=False)


def check_runs_dir(runs_dir: Path) -> Path:
    """`--runs-dir` for a campaign that runs: $PARATUNE_RUNS_DIR, which a campaign's folder
    follows first (as the service's controllers need), must not say another."""
    env = os.environ.get("PARATUNE_RUNS_DIR")
    if env and Path(env).resolve() != runs_dir.resolve():
        raise UserError(f"--runs-dir {runs_dir}: $PARATUNE_RUNS_DIR={env} names another "
                        "folder, and a campaign follows it first; unset it or drop --runs-dir")
    return runs_dir


def resume(
    campaign: str = typer.Argument(..., help="campaign name (its `name` in the spec)"),
    set_: list[str] = typer.Option([], "--set", help="change the budget: budget.KEY=VALUE, e.g. "
                                   "budget.max_trials=20 (repeatable; budget keys only)"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
) -> None:
    """Continue a stopped, crashed or finished campaign; finished trials are not run again.
    `--set budget.KEY=VALUE` extends it: the saved spec keeps the change, the journal records it."""
    if runs_dir is not None:
        check_runs_dir(runs_dir)
    root = runs_root(runs_dir)
    say_budget_changes(campaign, change_budget(root, campaign, set_))
    _run_campaign(load_campaign_spec(root, campaign), resume=True)


def cancel_local(campaign: str, runs_dir: Optional[Path]) -> None:
    """`paratune cancel` without a server: end the trials a stopped controller left running
    (a running controller holds the lock, and is named in the error)."""
    stopped = Controller(load_campaign_spec(runs_root(runs_dir), campaign)).cancel()
    out.print(f"cancelled {campaign}: stopped {stopped} running trial{'s' * (stopped != 1)}",
              markup=False, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------------- results


def which_campaign(campaign: Optional[str], runs_dir: Optional[Path]) -> str:
    """The campaign a command means (campaign_choice.py), said on stderr if not `campaign`."""
    chosen, note = choose_campaign(runs_root(runs_dir), campaign)
    if note:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    return chosen


def best(campaign: Optional[str], fmt: str, output: Optional[Path], runs_dir: Optional[Path],
         as_json: bool) -> None:
    """`paratune best` on the local runs directory: the best configuration, as a launch file."""
    if fmt not in formats():
        raise UserError(f"--format: unknown format {fmt!r}; choose one of {', '.join(formats())}")
    campaign = which_campaign(campaign, runs_dir)
    view = open_campaign(campaign, runs_dir)
    spec, summary = view.spec, view.summary()
    if summary.best is None:
        raise CampaignStateError(
            f"campaign {campaign!r} has no successful trial yet; see `paratune status {campaign}`"
        )
    config, at_target = layout_for_target(spec, summary.best)
    text = export(fmt, spec, summary.best.trial_id, config, view.trial_dir(summary.best.trial_id))
    for note in filter(None, (unmeasured_note(fmt, spec), at_target)):
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    metric = spec.objective.metric
    deliver_launch_file(text, fmt, output, as_json, {
        "campaign": campaign, "trial_id": summary.best.trial_id,
        "config": config.to_dict(), metric: summary.best.result.metric(metric),
        "result": summary.best.result.to_dict()}, campaign_dir=view.dir,
        inputs=campaign_inputs(spec.trial))
