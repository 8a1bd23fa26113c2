"""The live display of a running campaign (rich), and its closing summary table."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape

from orchestrator.cli.campaign_table import number
from orchestrator.cli.layout_table import Column, Row, best_first, infeasible_line, print_layouts
from orchestrator.cli.table_fit import packed
from orchestrator.common.objective import Objective
from orchestrator.common.paths import runs_root
from orchestrator.export import own_format
from orchestrator.layout import knobs, layout_key
from orchestrator.record.best import BestSoFar, finish_order
from orchestrator.record.journal import TrialRecord
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.registry import trainer_for



def export_hint(spec: CampaignSpec) -> str:
    """The `paratune best` command that exports this campaign's winner in its own trainer's
    format, as typed from here (with --runs-dir where `best` would not find it alone)."""
    fmt, runs = own_format(spec), spec.runs_dir()
    where = "" if runs.resolve() == runs_root().resolve() else f" --runs-dir {shlex.quote(str(runs))}"
    file = trainer_for(spec).export_file
    return f"paratune best {shlex.quote(spec.name)} --format {fmt}{where} -o {file}"


def command_lines(label: str, command: str, width: int) -> list[str]:
    """`label command` on one line where it fits, else the command under the label, continued
    with ` \\` between its words where it is still too wide: every line can be pasted."""
    if len(f"{label} {command}") <= width:
        return [f"{label} {command}"]
    units: list[str] = []  # an option stays on the line of its value
    for word in map(shlex.quote, shlex.split(command)):
        if units and units[-1].startswith("-") and " " not in units[-1] \
                and not word.startswith("-"):
            units[-1] += f" {word}"
        else:
            units.append(word)
    return [label, *packed(units[0], units[1:], width, gap=" ", indent="  ", end=" \\")]


def key_parts(layout: Layout) -> list[str]:
    """A layout's key as its knobs' parts (`tp2`, `interleaved2`, `fp8-delayed`), each whole."""
    values, parts = layout.knob_values(), []
    for part in filter(None, (k.key_part(values) for k in knobs())):
        if part.startswith("-") or not parts:
            parts.append(part.lstrip("-"))
        else:  # a knob whose part qualifies the one before (`interleaved` + `2`)
            parts[-1] += part
    rest = layout.key()[len(layout_key(values)):].lstrip("-")  # the sharding, if any
    return parts + ([rest] if rest else [])


def _fmt(value: float | None) -> str:
    return number(value)  # 53,170 rather than 5.317e+04


class CampaignProgress:
    """Receives controller events; shows trials done of the budget and the best so far."""

    def __init__(self, console: Console, spec: CampaignSpec):
        self.console = console
        self.spec = spec
        self.metric = spec.objective.metric
        self.best = BestSoFar(Objective.of(spec.objective))  # the campaign view's rule
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console,
            transient=False,
        )
        self.task = self.progress.add_task(
            spec.name, total=spec.budget.max_trials, status="starting"
        )

    def __enter__(self) -> "CampaignProgress":
        return self  # the display starts with the first trial, after any one-line error

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self.progress.stop()

    _started = False

    def already_done(self, records: list[TrialRecord]) -> None:
        """On resume: start the count and the best from the trials that finished before, in
        the order they finished."""
        done = finish_order(records)
        for record in done:
            self.best.add(record)
        self.progress.update(
            self.task, completed=sum(r.result.status != "infeasible" for r in done),
            status=self._best_status())

    def _best_status(self) -> str:
        """The best so far: a full measurement's once one exists, else the best screen's."""
        label = "best screened" if self.best.screened_only else "best"
        return f"{label} {self.metric} {_fmt(self.best.value)}"

    def update(self, kind: str, record: TrialRecord) -> None:
        if not self._started:
            self.progress.start()
            self._started = True
        if kind == "submitted":
            # The bar's last column is cut at its width: the layout comes whole in the
            # trial's line when it ends.
            self.progress.update(self.task, status=f"running {record.trial_id}")
            return
        if kind == "activity":  # what the trial's log says it is doing (warm-up, timed, ...)
            self.progress.update(self.task, status=f"{record.trial_id}: {record.activity}")
            return
        result = record.result
        self.best.add(record)
        said = (f"{self.metric}={_fmt(result.metric(self.metric))}" if result.ok
                else result.error[:90] if result.error else "")
        line = f"{record.trial_id} {record.config.key():<40} {result.status:<10} {said}".rstrip()
        console = self.progress.console
        # Too wide: the same words packed to the width; a key wider than a line in its parts.
        key = record.config.key()
        layout = [key] if len(key) + 2 <= console.width else key_parts(record.config)
        lines = [line] if len(line) <= console.width else packed(
            record.trial_id, [*layout, result.status, *said.split()], console.width, gap=" ",
            indent="  ")
        for text in lines:
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        if result.status != "infeasible":
            self.progress.advance(self.task)
        self.progress.update(self.task, status=self._best_status())

    def print_summary(self, out: Console, summary) -> None:
        """Every trial that ran, best first by the objective (then the failed and the
        unfinished in trial order), a column per knob that varies; the layouts the cost model
        ruled out fold into one counted line."""
        objective = Objective.of(self.spec.objective)
        shown = [r for r in summary.records if not r.pruned]
        pruned = [r for r in summary.records if r.pruned]
        phases = len({r.phase for r in shown}) > 1
        rows = [Row([r.trial_id, *([r.phase] if phases else [])], r.config, _summary_cells(
                    r, self.metric)) for r in best_first(objective, shown,
                                                          lambda r: objective.value(r.result))]
        # The trials that ran and the layouts pruned unrun, counted apart (`paratune logs`).
        running = sum(1 for r in shown if r.result is None)
        counted = ", ".join([f"{len(shown) - running} trials ran"]
                            + ([f"{running} running"] if running else [])
                            + ([f"{len(pruned)} layouts pruned"] if pruned else []))
        out.print(f"[bold]campaign {escape(summary.name)}[/]: {counted}", highlight=False)
        print_layouts(out, rows, [Column("trial", numeric=False),
                                  *([Column("phase", numeric=False)] if phases else [])],
                      [Column("status", numeric=False),
                       Column(self.metric, self.metric.replace("_per_", "/")),
                       Column("step s", optional=True), Column("peak GB", "GB")])
        if pruned:
            out.print(infeasible_line([r.result.error for r in pruned]), markup=False,
                      highlight=False)
        if summary.best is None:
            out.print("no successful trial")
            return
        b = summary.best
        value, key = f"{self.metric}={_fmt(b.result.metric(self.metric))}", b.config.key()
        # The layout's key is one long word: it goes under the line that cannot hold it, and
        # is left to the best's row in the table where no line can.
        if len(f"best: {b.trial_id} {key}  {value}") <= out.width:
            out.print(f"[bold green]best[/]: {b.trial_id} {escape(key)}  {value}", soft_wrap=True)
        else:
            out.print(f"[bold green]best[/]: {b.trial_id}  {value}", soft_wrap=True)
            if len(key) + 2 <= out.width:
                out.print(f"  {key}", markup=False, highlight=False, soft_wrap=True)
        for line in command_lines("export it:", export_hint(self.spec), out.width):
            out.print(line, markup=False, highlight=False, soft_wrap=True)


def _summary_cells(record: TrialRecord, metric: str) -> list[str]:
    res = record.result
    if res is None:
        return ["running", "-", "-", "-"]
    return [res.status, _fmt(res.metric(metric)), _fmt(res.step_time_s),
            _fmt(res.peak_memory_gb)]
