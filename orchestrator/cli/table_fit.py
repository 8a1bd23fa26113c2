"""Tables that never split a cell: a table is printed only where it fits the terminal whole,
and a terminal too narrow for it gets one record per row instead, `key=value` pairs packed into
lines with no pair split (rich would otherwise fold `1,103,942` into `1,103,` over `942`)."""

from __future__ import annotations

from typing import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

RECORD_INDENT = "    "  # the lines of a record after its first
PAIR_GAP = "  "  # between two pairs: wider than the spaces inside a value (`6,761 sim`)


def fits(console: Console, table: Table) -> bool:
    """Whether the table shows every cell whole at the console's width without squeezing."""
    unbounded = console.options.update_width(1_000_000)
    return Measurement.get(console, unbounded, table).maximum <= console.width


def pair(label: str, value: str) -> str:
    """`label=value`, the label one word (`step s` -> `step_s`)."""
    return f"{label.replace(' ', '_')}={value}"


def packed(first: str, words: Sequence[str], width: int, gap: str = PAIR_GAP,
           indent: str = RECORD_INDENT, end: str = "") -> list[str]:
    """`first`, then the words, greedily in lines of at most `width` columns, the lines after
    the first indented and each but the last closed by `end` (` \\` for a shell command). A word
    is never split: one too long for any line stands on a line of its own."""
    lines, line = [], first
    for word in words:
        joined = f"{line}{gap}{word}" if line.strip() else f"{line}{word}"
        if len(joined) + len(end) <= width or not line.strip():
            line = joined
            continue
        lines.append(line + end)
        line = indent + word
    return lines + [line]


def print_records(console: Console, records: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Each record: its title, then its pairs, packed to the console's width."""
    for title, pairs in records:
        for line in packed(title, pairs, console.width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
