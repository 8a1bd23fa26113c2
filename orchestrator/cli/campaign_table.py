"""How the commands that ask the campaign service show its campaign objects: the `ls` table
and the `status` lines (both read the objects the API returns, never a journal)."""

from __future__ import annotations

from typing import Any, Optional

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

STATE_STYLE = {"queued": "yellow", "running": "cyan", "finished": "green", "failed": "red",
               "cancelled": "magenta", "refused": "red"}
REASON_COLUMN_WIDTH = 110  # narrower terminals show the reasons under the table


def number(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def gpu_hours(c: dict[str, Any]) -> str:
    used, budget = c.get("gpu_hours") or 0.0, c.get("gpu_hours_budget")
    return hours(used) + (f" / {hours(budget)}" if budget else "")


def best_value(c: dict[str, Any], with_metric: bool = True) -> str:
    best = c.get("best")
    if not best:
        return "-"
    return f"{number(best.get('value'))} {best.get('metric', '') if with_metric else ''}".strip()


def state(c: dict[str, Any]) -> str:
    name = c.get("state", "?")
    return f"[{STATE_STYLE.get(name, 'white')}]{escape(name)}[/]"


def print_table(console: Console, found: list[dict[str, Any]]) -> None:
    """One row per campaign: state, trials of max, running, GPU-hours of the budget, best."""
    metrics = {c["best"].get("metric") for c in found if c.get("best")}
    shared = metrics.pop() if len(metrics) == 1 else None  # then named once, in the header
    reasons = [c for c in found if c.get("reason")]
    reason_column = bool(reasons) and console.width >= REASON_COLUMN_WIDTH
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    headers = ["campaign", "owner", "state", "trials", "running", "GPU-hours",
               f"best {shared}" if shared else "best"] + (["reason"] if reason_column else [])
    for header in headers:
        table.add_column(header, no_wrap=header != "reason", overflow="fold")
    for c in found:
        cells = [escape(c["name"]), escape(str(c.get("owner"))), state(c),
                 f"{c.get('trials', 0)}/{c.get('max_trials', 0)}", str(c.get("running", 0)),
                 gpu_hours(c), escape(best_value(c, with_metric=shared is None))]
        table.add_row(*cells, *([escape(c.get("reason") or "")] if reason_column else []))
    console.print(table)
    if not reason_column:
        for c in reasons:
            console.print(f"[bold]{escape(c['name'])}[/]: {escape(c['reason'])}", highlight=False,
                          soft_wrap=True)


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
