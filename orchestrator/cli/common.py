"""What every `paratune` command module shares: the two consoles, JSON output, the runs
directory option, opening a saved campaign, writing a file the user named, and the cost
model's ranking table."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from orchestrator.cli.campaign_table import number
from orchestrator.cli.layout_table import Column, Row, best_first, print_layouts
from orchestrator.common.errors import UserError
from orchestrator.common.objective import Objective
from orchestrator.common.paths import runs_root
from orchestrator.costmodel import CostModel
from orchestrator.costmodel.fit_verdict import memory_margin
from orchestrator.costmodel.ranking import Ranking, rank_amsp, rank_by_throughput
from orchestrator.export import script_formats
from orchestrator.record.campaign import CampaignView
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates
from orchestrator.campaign_spec.unused_values import unused_values

console = Console(stderr=True)  # messages and progress
out = Console()  # results

RUNS_DIR_OPTION = typer.Option(
    None, "--runs-dir", help="where campaigns keep their state (default: $PARATUNE_RUNS_DIR or ./runs)")


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")


def write_output(path: Path, text: str, option: str, executable: bool = False,
                 campaign_dir: Path | None = None, own_file: str | None = None,
                 inputs: tuple[Path, ...] = ()) -> None:
    """Write the file `option` names; a path that cannot take it is a one-line error, and so
    is one that would overwrite a file of the campaign's record in `campaign_dir` (its
    journal, spec, trials; `own_file`, the command's own output there, may be replaced) or a
    file the campaign reads (`inputs`: its base configs and scripts)."""
    if campaign_dir is not None and path.exists():
        target, folder = path.resolve(), campaign_dir.resolve()
        if target.is_relative_to(folder) and target != folder / (own_file or ""):
            raise UserError(f"{option} {path}: would overwrite the campaign's own record in "
                            f"{campaign_dir}; write the file somewhere else")
    if path.exists() and path.resolve() in {i.resolve() for i in inputs}:
        raise UserError(f"{option} {path}: is a file the campaign reads (its base config or "
                        "script); write the export to another name")
    try:
        path.write_text(text)
        mode = path.stat().st_mode & 0o777
        # Executable for whoever may read it (the umask decides who that is), like chmod +x;
        # a file that is no script loses the bits a script written there before had.
        path.chmod(mode | (mode & 0o444) >> 2 if executable else mode & ~0o111)
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write there ({exc.strerror}); give a file "
                        "path in a writable folder") from None


def deliver_launch_file(text: str, fmt: str, output: Optional[Path], as_json: bool,
                        info: dict, campaign_dir: Path | None = None,
                        inputs: tuple[Path, ...] = ()) -> None:
    """`paratune best`'s file: to `output` (`-`: stdout), or stdout; with `--json`, `info`
    (the winner) with the format, the file written and, when none was, the text."""
    if output is not None and str(output) == "-":  # the usual name for standard output
        output = None
    if output:
        write_output(output, text, "-o", executable=fmt in script_formats(),
                     campaign_dir=campaign_dir, inputs=inputs)
    if as_json:
        print_json({**info, "format": fmt, "file": str(output) if output else None,
                    "text": None if output else text})
    elif not output:
        sys.stdout.write(text)
    else:
        console.print(f"wrote {output}")


def open_campaign(campaign: str, runs_dir: Optional[Path]) -> CampaignView:
    """The read-only view of a saved campaign (a one-line error if there is none)."""
    return CampaignView.open(runs_root(runs_dir), campaign)


def rank_spec(spec: CampaignSpec, top_k: int, cost: CostModel | None = None,
              candidates: list[Layout] | None = None) -> Ranking:
    """The space ranked by the cost model; `cost` and `candidates` when the caller has them."""
    cost = cost or cost_model_for(spec)
    if candidates is None:  # an empty space is an error that says why
        candidates = fitted_candidates(spec, cost)
    if spec.space.kind == "amsp":
        return rank_amsp(cost, candidates, top_k)
    return rank_by_throughput(cost, candidates, top_k)


def print_space_notes(spec: CampaignSpec, candidates: list[Layout]) -> None:
    """A line on stderr per value the spec's space lists that no layout takes, with why."""
    for line in unused_values(spec, candidates):
        console.print(f"note: {line}", markup=False, highlight=False, soft_wrap=True)


def print_ranking(spec: CampaignSpec, ranking: Ranking) -> None:
    """`plan` and `run --dry-run`: the layouts the cost model ranks highest, best first by
    the campaign's objective, a column per knob that varies between them."""
    out.print(
        f"{spec.name}: {ranking.candidates} valid configs, {ranking.feasible} fit in "
        f"{spec.cluster.memory_gb:g} GB ({ranking.planner} planner)"
    )
    objective = Objective.of(spec.objective)
    estimates = best_first(objective, ranking.top, objective.predicted)
    if ranking.plan is not None:  # the planner's pick (its tie rule may prefer less traffic)
        row = next((i for i, e in enumerate(estimates, 1) if e is ranking.plan.estimate), 1)
        out.print(f"AMSP plan (s0p,s1p,s0g,s1g,s0os,s1os) = {ranking.plan.factors.as_tuple()}"
                  f", row {row} below")
    if estimates:
        print_layouts(out, _ranking_rows(estimates), [Column("#")], RANKING_COLUMNS)
    if ranking.risky:
        margin = memory_margin(spec.cluster.device)
        out.print(f"{ranking.risky_count} risky: predicted over {spec.cluster.memory_gb:g} GB, "
                  f"within the memory model's {margin:.0%} margin (up to "
                  f"{spec.cluster.memory_gb * (1 + margin):g} GB); a campaign measures "
                  "them, and an OOM is recorded. The best of them:")
        risky = best_first(objective, ranking.risky, objective.predicted)
        print_layouts(out, _ranking_rows(risky), [Column("risky #", "#")], RANKING_COLUMNS)


def _ranking_rows(estimates: list) -> list[Row]:
    return [Row([str(rank)], e.config, [f"{e.memory_gb:.2f}", number(e.step_time_s),
                                        number(e.tokens_per_s), number(e.tflops_per_gpu),
                                        f"{e.mfu:.1%}", f"{e.hfu:.1%}"])
            for rank, e in enumerate(estimates, 1)]


RANKING_COLUMNS = (Column("memory GB", "GB"), Column("step s"), Column("tokens/s"),
                   Column("TFLOPS/GPU", "TFLOPS", optional=True), Column("MFU"),
                   Column("HFU", optional=True))
