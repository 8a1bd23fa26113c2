"""How the commands that ask the campaign service show its campaign objects: the `ls` table
(one record per campaign where a terminal is too narrow for it) and the `status` lines (both
read the objects the API returns, never a journal)."""

from __future__ import annotations

import math
from typing import Any, Optional

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.table_fit import fits, pair, print_records

STATE_STYLE = {"queued": "yellow", "running": "cyan", "finished": "green", "failed": "red",
               "cancelled": "magenta", "refused": "red"}
REASON_COLUMN_WIDTH = 110  # narrower terminals show the reasons under the table


def number(value: Optional[float]) -> str:
    """A number as people write it: 53,170 and 0.00001234, never 5.317e+04 or 1.234e-05."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:.4g}"
    if "e" in text:  # below 1e-4: four significant digits, written out
        text = f"{value:.{3 - math.floor(math.log10(abs(value)))}f}"
    return text


def hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


SIMULATED_MARK = " sim"
SIMULATED_NOTE = "sim: a simulated rehearsal's GPU-hours, counted against no quota"


def gpu_hours(c: dict[str, Any]) -> str:
    """Used (of the budget); a rehearsal's marked apart, as no quota counts them."""
    used, budget = c.get("gpu_hours") or 0.0, c.get("gpu_hours_budget")
    mark = SIMULATED_MARK if c.get("simulated") else ""
    return hours(used) + mark + (f" / {hours(budget)}" if budget else "")


def best_value(c: dict[str, Any], with_metric: bool = True) -> str:
    best = c.get("best")
    if not best:
        return "-"
    return f"{number(best.get('value'))} {best.get('metric', '') if with_metric else ''}".strip()


def state(c: dict[str, Any]) -> str:
    name = c.get("state", "?")
    return f"[{STATE_STYLE.get(name, 'white')}]{escape(name)}[/]"


# (header, short header): the short headers are for terminals the full ones overflow.
LS_COLUMNS = (("campaign", "campaign"), ("owner", "owner"), ("state", "state"),
              ("trials", "trials"), ("running", "run"), ("GPU-hours", "GPU-h"), ("best", "best"),
              ("reason", "reason"))


def _ls_cells(c: dict[str, Any], with_metric: bool) -> dict[str, str]:
    """A campaign's cells as plain text (the table escapes and colours them)."""
    return {"campaign": c["name"], "owner": str(c.get("owner")), "state": c.get("state", "?"),
            "trials": f"{c.get('trials', 0)}/{c.get('max_trials', 0)}",
            "running": str(c.get("running", 0)), "GPU-hours": gpu_hours(c),
            "best": best_value(c, with_metric=with_metric), "reason": c.get("reason") or ""}


def _ls_table(found: list[dict[str, Any]], shared: Optional[str], names: list[str],
              short: bool) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0))
    widest = max((len(c.get("state", "?")) for c in found), default=0)
    for name, abbreviated in LS_COLUMNS:
        if name not in names:
            continue
        header = abbreviated if short else name
        if name == "best" and shared:  # the metric named once, shorter in the short header
            header += f" {shared.replace('_per_', '/') if short else shared}"
        table.add_column(header, no_wrap=True,
                         min_width=widest if name == "state" else None,
                         justify="right" if name in ("running", "GPU-hours") else "left")
    for c in found:
        cells = {name: escape(text) for name, text in _ls_cells(c, shared is None).items()}
        cells["state"] = state(c)
        table.add_row(*(cells[name] for name in names))
    return table


def _ls_record(c: dict[str, Any], names: list[str]) -> tuple[str, list[str]]:
    """`name  state`, then `trials=3/6  running=1  GPU-hours=...  best=...` (and the owner)."""
    cells = _ls_cells(c, with_metric=True)
    return (f"{cells['campaign']}  {cells['state']}",
            [pair(name, cells[name]) for name in names
             if name not in ("campaign", "state", "reason")])


def print_table(console: Console, found: list[dict[str, Any]]) -> None:
    """One row per campaign: state, trials of max, running, GPU-hours of the budget, best.
    Nothing is cut or split: a terminal too narrow for the full table gets short headers and
    the owner named once above it when there is only one, then one record per campaign where
    even that is too wide, and the reasons under it."""
    metrics = {c["best"].get("metric") for c in found if c.get("best")}
    shared = metrics.pop() if len(metrics) == 1 else None  # then named once, in the header
    reasons = [c for c in found if c.get("reason")]
    owners = {str(c.get("owner")) for c in found}
    names = [name for name, _ in LS_COLUMNS if name != "reason"]
    short = not fits(console, _ls_table(found, shared, names, short=False))
    if short and len(owners) == 1:
        names.remove("owner")
        console.print(f"owner: {escape(owners.pop())}", highlight=False)
    if reasons and not short and console.width >= REASON_COLUMN_WIDTH:
        names.append("reason")
    table = _ls_table(found, shared, names, short)
    if fits(console, table):
        console.print(table)
    else:
        print_records(console, [_ls_record(c, names) for c in found])
    if "reason" not in names:
        for c in reasons:
            console.print(f"[bold]{escape(c['name'])}[/]: {escape(c['reason'])}", highlight=False)
    if any(c.get("simulated") for c in found):
        console.print(SIMULATED_NOTE, highlight=False)


def status_lines(c: dict[str, Any]) -> list[str]:
    """`paratune status` through a server: what the campaign object says, in a few lines."""
    counts = ", ".join(f"{v} {k}" for k, v in sorted((c.get("counts") or {}).items()))
    line = (f"[bold]{escape(c['name'])}[/] ({escape(str(c.get('owner')))}): {state(c)}, "
            f"{c.get('trials', 0)}/{c.get('max_trials', 0)} trials ({counts or 'none yet'})")
    best = c.get("best")
    if best:
        line += f"; best {escape(str(best.get('trial_id')))} at {escape(best_value(c))}"
    lines = [line, f"  GPU-hours: {gpu_hours(c)}"]
    if c.get("reason"):
        lines.append(f"  {escape(c['reason'])}")
    return lines
