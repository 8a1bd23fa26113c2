"""The `paratune` command line. Bad input is one line on stderr and exit code 2, never a traceback.

`status`, `best` and `estimate` take `--json` and then print exactly one JSON object on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import click
import typer
from rich.console import Console

from orchestrator.errors import CampaignStateError, UserError
from orchestrator.spec import CampaignSpec, load_spec

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Find the fastest parallelism and sharding for training an LLM on a cluster.",
)
console = Console(stderr=True)
out = Console()

RUNS_DIR_HELP = "where campaigns keep their state (default: $PARATUNE_RUNS_DIR or ./runs)"


def _runs_dir(option: Optional[Path]) -> Path:
    return option or Path(os.environ.get("PARATUNE_RUNS_DIR") or "runs")


def _print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")


# ---------------------------------------------------------------------------------- run


def _run_campaign(spec: CampaignSpec, resume: bool) -> None:
    from orchestrator.controller import Controller
    from orchestrator.progress import CampaignProgress

    with CampaignProgress(console, spec) as progress:
        controller = Controller(spec, on_event=progress.update)
        summary = controller.run(resume=resume)
    progress.print_summary(out, summary)


@app.command()
def run(
    spec_file: Path = typer.Argument(..., help="campaign YAML"),
    set_: list[str] = typer.Option([], "--set", help="override a key: a.b=value (repeatable)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the pruned space; run nothing"),
) -> None:
    """Run a campaign to its end."""
    spec = load_spec(spec_file, set_)
    if dry_run:
        _dry_run(spec)
        return
    _run_campaign(spec, resume=False)


def _dry_run(spec: CampaignSpec, top: int = 10) -> None:
    from orchestrator.cli_model import print_ranking, rank_spec

    print_ranking(spec, rank_spec(spec, top))


@app.command()
def resume(
    campaign: str = typer.Argument(..., help="campaign name (its `name` in the spec)"),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
) -> None:
    """Continue a stopped or crashed campaign; finished trials are not run again."""
    from orchestrator.controller import load_campaign_spec

    _run_campaign(load_campaign_spec(_runs_dir(runs_dir), campaign), resume=True)


# ---------------------------------------------------------------------------------- results


def _load_summary(campaign: str, runs_dir: Optional[Path], with_budget: bool = False):
    from orchestrator.controller import Controller, load_campaign_spec

    spec = load_campaign_spec(_runs_dir(runs_dir), campaign)
    controller = Controller(spec)
    if with_budget:
        return spec, controller.summary(), controller.budget_state()
    return spec, controller.summary()


@app.command()
def status(
    campaign: Optional[str] = typer.Argument(None, help="campaign name; all campaigns if omitted"),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Trials done / running / failed, and the best so far."""
    root = _runs_dir(runs_dir)
    names = [campaign] if campaign else sorted(
        p.name for p in root.glob("*") if (p / "spec.yaml").exists()
    )
    reports = []
    for name in names:
        spec, summary, budget = _load_summary(name, root, with_budget=True)
        best = summary.best
        metric = spec.objective.metric
        reports.append({
            "campaign": name,
            "trials": len(summary.records),
            "max_trials": spec.budget.max_trials,
            "counts": summary.counts(),
            "budget": budget.to_dict(),
            "best": None if best is None else {
                "trial_id": best.trial_id, "config": best.config.to_dict(),
                metric: best.result.metric(metric),
            },
        })
    if as_json:
        _print_json(reports[0] if campaign else {"campaigns": reports})
        return
    for r in reports:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(r["counts"].items())) or "no trials"
        best = r["best"]
        line = f"[bold]{r['campaign']}[/]: {r['trials']} trials ({counts})"
        if best:
            metric_value = next(v for k, v in best.items() if k not in ("trial_id", "config"))
            line += f"; best {best['trial_id']} at {metric_value:,.4g}"
        out.print(line)
        b = r["budget"]
        used = [f"{b['trials']}/{b['max_trials']} trials", f"{b['gpu_hours']:.3g} GPU-hours"]
        if b["gpu_hours_left"] is not None:
            used[-1] += f" ({b['gpu_hours_left']:.3g} left)"
        if b["wall_clock_left_s"] is not None:
            used.append(f"{b['wall_clock_left_s']:.0f} s of wall clock left")
        if b["patience"] is not None:
            used.append(f"{b['since_improvement']}/{b['patience']} trials without improvement")
        out.print("  budget: " + ", ".join(used) + (f"; stopped: {b['exhausted']}" if b["exhausted"] else ""))


@app.command()
def best(
    campaign: str = typer.Argument(..., help="campaign name"),
    fmt: str = typer.Option("yaml", "--format",
                            help="yaml | torchrun | sbatch | deepspeed | megatron | torchtitan"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write to this file"),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The best configuration, as a launch file."""
    from orchestrator.export import FORMATS, export

    if fmt not in FORMATS:
        raise UserError(f"--format: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    spec, summary = _load_summary(campaign, runs_dir)
    if summary.best is None:
        raise CampaignStateError(
            f"campaign {campaign!r} has no successful trial yet; see `paratune status {campaign}`"
        )
    text = export(fmt, spec, summary.best.trial_id, summary.best.config)
    if output:
        output.write_text(text)
        if fmt in ("torchrun", "sbatch"):
            output.chmod(0o755)
    if as_json:
        metric = spec.objective.metric
        _print_json({
            "campaign": campaign, "trial_id": summary.best.trial_id,
            "config": summary.best.config.to_dict(), metric: summary.best.result.metric(metric),
            "result": summary.best.result.to_dict(), "format": fmt,
            "file": str(output) if output else None,
        })
    elif not output:
        sys.stdout.write(text)
    else:
        console.print(f"wrote {output}")


# ---------------------------------------------------------------------------------- entry


def _register_commands() -> None:
    from orchestrator import cli_model, cli_report  # noqa: F401 - register their commands


def main(argv: list[str] | None = None) -> int:
    _register_commands()
    logging.basicConfig(level=logging.WARNING, format="paratune: %(message)s")
    try:
        app(args=argv, prog_name="paratune", standalone_mode=False)
    except UserError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except click.exceptions.UsageError as exc:
        console.print(f"error: {exc.format_message()}", markup=False, highlight=False,
                      soft_wrap=True)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        console.print("interrupted; continue with `paratune resume CAMPAIGN`", markup=False)
        return 130
    return 0


if __name__ == "__main__":
    # Run the importable module's `main`: the other command modules register on its `app`.
    from orchestrator import cli as _module

    sys.exit(_module.main())
