"""`paratune status` on the local runs directory: how each campaign stands (state and counts,
its budget, a slice campaign's two scales, the MLflow backlog), as lines or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.markup import escape

from orchestrator.cli import campaign_table
from orchestrator.cli.campaigns import backlog_line, mlflow_backlog, which_campaign
from orchestrator.cli.common import console, open_campaign, out, print_json
from orchestrator.cli.resume_lines import extend_hint
from orchestrator.common.errors import UserError
from orchestrator.common.paths import runs_root
from orchestrator.record.campaign import unfinished_label
from orchestrator.record.slice_summary import slice_line, slice_summary
from orchestrator.campaign_spec import SPEC_FILE


def status(campaign: Optional[str], runs_dir: Optional[Path], as_json: bool) -> None:
    """`paratune status` on the local runs directory: trials done / running / failed, and the
    best so far."""
    root = runs_root(runs_dir)
    campaign = campaign and which_campaign(campaign, root)
    names = [campaign] if campaign else sorted(
        p.name for p in root.glob("*") if (p / SPEC_FILE).exists()
    )
    if not names:
        if as_json:
            print_json({"campaigns": []})
            return
        raise UserError(f"no campaigns under {root}/; start one with `paratune run SPEC.yaml`, "
                        "or pass --runs-dir (or set $PARATUNE_RUNS_DIR)")
    reports, unreadable = [], []
    for name in names:
        try:
            reports.append(_status_report(name, open_campaign(name, root)))
        except UserError as exc:
            if campaign:
                raise
            unreadable.append({"campaign": name, "error": str(exc)})  # the others still show
    if as_json:
        print_json(reports[0] if campaign else {"campaigns": reports, "unreadable": unreadable})
        return
    for report in reports:
        _print_status(report)
    for u in unreadable:
        console.print(f"{u['campaign']}: cannot be read: {u['error']}", markup=False,
                      highlight=False, soft_wrap=True)


def _status_report(name: str, view) -> dict:
    """One campaign's status as `paratune status --json` gives it."""
    spec, summary = view.spec, view.summary()
    best, metric = summary.best, spec.objective.metric
    phase, stop_reason = view.phase()
    return {
        "campaign": name,
        "state": phase,
        "stop_reason": stop_reason,
        "trials": len(summary.records),
        "max_trials": spec.budget.max_trials,
        "counts": summary.counts(unfinished_label(phase)),
        "budget": view.budget(summary.records).to_dict(),
        "mlflow": mlflow_backlog(spec, summary.records),
        "journal_lines_skipped": len(view.journal.damage.lines),
        "best": None if best is None else {
            "trial_id": best.trial_id, "config": best.config.to_dict(),
            metric: best.result.metric(metric)},
        "slice": slice_summary(spec, summary.records, view.objective),
    }


def _print_status(r: dict) -> None:
    """A status report as two or three lines: state and counts, budget, MLflow backlog."""
    counts = ", ".join(f"{v} {k}" for k, v in sorted(r["counts"].items())) or "no trials"
    best = r["best"]
    state = r["state"] + (f" ({r['stop_reason']})" if r["stop_reason"] else "")
    if r["state"] == "stopped":
        state += f"; continue with `paratune resume {r['campaign']}`"
    line = f"[bold]{r['campaign']}[/]: {escape(state)}, {r['trials']} trials ({counts})"
    if best:
        metric_value = next(v for k, v in best.items() if k not in ("trial_id", "config"))
        line += f"; best {best['trial_id']} at {campaign_table.number(metric_value)}"
    out.print(line)
    b = r["budget"]
    used = [f"{b['trials']}/{b['max_trials']} trials", f"{campaign_table.hours(b['gpu_hours'])} GPU-hours"]
    if b["gpu_hours_reserved"]:
        used[-1] += f" used, {campaign_table.hours(b['gpu_hours_reserved'])} reserved by running trials"
    if b["gpu_hours_left"] is not None:
        used[-1] += f" ({campaign_table.hours(b['gpu_hours_left'])} left)"
    if b["wall_clock_left_s"] is not None:
        used.append(f"{b['wall_clock_left_s']:.0f} s of wall clock left")
    if b["patience"] is not None:
        used.append(f"{b['since_improvement']}/{b['patience']} trials without improvement")
    ended = b["exhausted"] and f"; stopped: {b['exhausted']}{extend_hint(r['campaign'], b['exhausted'])}"
    out.print("  budget: " + ", ".join(used) + (ended or ""), soft_wrap=True)
    if r["slice"]:
        out.print("  " + slice_line(r["slice"], campaign_table.number), markup=False,
                  highlight=False, soft_wrap=True)
    if r["mlflow"] and r["mlflow"]["not_in_mlflow"]:
        out.print(f"  MLflow: {backlog_line(r['mlflow'])}", markup=False, highlight=False,
                  soft_wrap=True)
