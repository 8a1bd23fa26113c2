"""Tables of layouts that a person reads: one column per knob that varies across the rows.

A layout's key (`tp1-pp1-dp2-z2-mbs4-gas1-acnone`) is one long word, which a narrow terminal
cuts just where two layouts differ. Here each knob that varies gets a column of its own, the
knobs every row shares are named once above the table, the knob names come from the layout
schema (never a list kept here), and a table too wide for the terminal switches to the knobs'
short names (those of the key: tp, z, mbs, ac), then leaves out the columns another implies,
then prints one record per layout (`tp=2  cp=4 ...`), rather than split a value. Layouts the
cost model ruled out fold into one counted line, so the table lists what was measured or
predicted.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.campaign_table import number
from orchestrator.cli.table_fit import fits, pair, print_records
from orchestrator.common.objective import Objective
from orchestrator.layout import Knob, knobs
from orchestrator.space import Layout

T = TypeVar("T")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
REASONS_SHOWN = 2  # the most common reasons an infeasible line names


@dataclass(frozen=True)
class Column:
    """A column besides the knobs: its header, the shorter one for narrow terminals, whether
    it holds numbers (right-aligned) or text, and whether a terminal too narrow for the table
    may leave it out (a figure another column implies, e.g. step time beside throughput)."""

    header: str
    short: str = ""
    numeric: bool = True
    optional: bool = False


@dataclass(frozen=True)
class Row:
    """One layout's line: cells for the columns before the knobs, the layout (None where
    there is none, e.g. nothing fits), and cells for the columns after."""

    lead: Sequence[str]
    config: Optional[Layout]
    tail: Sequence[str]


def best_first(objective: Objective, items: Iterable[T],
               value_of: Callable[[T], Optional[float]]) -> list[T]:
    """Items with a value, best first by the objective, then the rest in their own order."""
    items = list(items)
    ranked = objective.ranked(items, value_of)
    chosen = {id(item) for item in ranked}
    return ranked + [item for item in items if id(item) not in chosen]


def _sample(knob: Knob) -> Any:
    if knob.kind is bool:
        return True
    if knob.choices:
        return knob.choices[-1]
    return 2 if knob.kind is int else knob.default


def _schema_short(knob: Knob) -> str:
    """The prefix the knob's part of a layout key puts before its value (`-mbs4` -> mbs),
    or '' where its key part names no prefix."""
    values = {k.name: k.default for k in knobs()}
    value = values[knob.name] = _sample(knob)
    part = knob.key_part(values).lstrip("-")
    if knob.kind is not bool:
        text = str(value)
        part = part[:-len(text)] if part.endswith(text) else ""
    return part if part.isalpha() else ""


def short_names(names: Sequence[str]) -> dict[str, str]:
    """Short headers for these params: the key's prefix, else the initials of a long name;
    a short name two params would share stays the full name."""
    schema = {k.name: k for k in knobs()}
    short = {}
    for name in names:
        derived = _schema_short(schema[name]) if name in schema else ""
        if not derived:
            words = name.split("_")
            derived = "".join(w[0] for w in words) if len(words) > 1 else name
        short[name] = derived
    taken = Counter(short.values())
    return {name: s if taken[s] == 1 else name for name, s in short.items()}


def value_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return number(value) if isinstance(value, float) else str(value)


def split_knobs(configs: Iterable[Layout]) -> tuple[list[str], dict[str, Any]]:
    """The params (`to_params`, in its order) whose values differ between the layouts, and
    those every layout shares with their one value."""
    params = [c.to_params() for c in configs]
    names = list(dict.fromkeys(name for p in params for name in p))
    varying = [n for n in names if len({repr(p.get(n)) for p in params}) > 1]
    shared = {n: params[0].get(n) for n in names if n not in varying}
    return varying, shared


def shared_line(configs: Sequence[Layout], shared: dict[str, Any]) -> str:
    """`all: tp=1 pp=1 ...`: the shared knobs a layout's key names (so knobs left at a
    default that means nothing, like compile=no, stay out), and shared sharding factors."""
    schema = {k.name: k for k in knobs()}
    values = configs[0].knob_values() if configs else {}
    named = [f"{n}={value_text(v)}" for n, v in shared.items()
             if n not in schema or schema[n].key_part(values)]
    return "all: " + " ".join(named) if named else ""


def _header(column: Column, short: bool) -> str:
    return column.short if short and column.short else column.header


def _knob_cells(row: Row, knob_names: Sequence[str]) -> list[str]:
    params = row.config.to_params() if row.config is not None else {}
    return [value_text(params.get(n)) if params else "" for n in knob_names]


def _table(lead: Sequence[Column], knob_names: Sequence[str], tail: Sequence[Column],
           rows: Sequence[Row], short: bool) -> Table:
    """Every cell on one line: a table only printed where it fits whole (`fits`)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    shorts = short_names(knob_names)
    for column in lead:
        _add(table, _header(column, short), column.numeric)
    for name in knob_names:
        numeric = all(isinstance(r.config.to_params().get(name), int)
                      and not isinstance(r.config.to_params().get(name), bool)
                      for r in rows if r.config is not None)
        _add(table, shorts[name] if short else name, numeric)
    for column in tail:
        _add(table, _header(column, short), column.numeric)
    for row in rows:
        table.add_row(*map(escape, [*row.lead, *_knob_cells(row, knob_names), *row.tail]))
    return table


def _add(table: Table, header: str, numeric: bool) -> None:
    table.add_column(header, justify="right" if numeric else "left", no_wrap=True)


def _title(lead: Sequence[Column], cells: Sequence[str]) -> str:
    """A record's first words: `#1`, `t0003 screen`, `GPUs=512`."""
    words = [f"{_header(c, True)}{cell}" if _header(c, True).endswith("#")
             else pair(c.header, cell) if c.numeric else cell for c, cell in zip(lead, cells)]
    return "  ".join(words)


def _records(lead: Sequence[Column], knob_names: Sequence[str], tail: Sequence[Column],
             rows: Sequence[Row]) -> list[tuple[str, list[str]]]:
    """One record per row, labelled as the short table's columns are; empty cells left out."""
    shorts = short_names(knob_names)
    labels = [shorts[n] for n in knob_names] + [_header(c, True) for c in tail]
    return [(_title(lead, row.lead),
             [pair(label, cell) for label, cell in zip(labels, [*_knob_cells(row, knob_names),
                                                                *row.tail]) if cell])
            for row in rows]


def print_layouts(console: Console, rows: Sequence[Row], lead: Sequence[Column] = (),
                  tail: Sequence[Column] = ()) -> None:
    """The shared knobs in a line, then the table: full knob names where they fit, the short
    ones (with a line saying what they stand for) where they would not, less the optional
    columns (named in a line) where even those would not, else one record per row."""
    configs = [row.config for row in rows if row.config is not None]
    varying, shared = split_knobs(configs)
    line = shared_line(configs, shared)
    if line:
        console.print(escape(line), highlight=False)
    table = _table(lead, varying, tail, rows, short=False)
    if fits(console, table):
        console.print(table)
        return
    short = _table(lead, varying, tail, rows, short=True)
    kept = [i for i, column in enumerate(tail) if not column.optional]
    narrow = _table(lead, varying, [tail[i] for i in kept],
                    [Row(r.lead, r.config, [r.tail[i] for i in kept]) for r in rows], short=True)
    table = short if fits(console, short) else narrow if fits(console, narrow) else None
    legend = [f"{s}={n}" for n, s in short_names(varying).items() if s != n]
    if legend:
        console.print(escape(f"{'columns' if table is not None else 'keys'}: " + " ".join(legend)),
                      highlight=False)
    if table is short:
        console.print(table)
    elif table is narrow:
        left_out = ", ".join(c.header for c in tail if c.optional)
        console.print(escape(f"left out at {console.width} columns: {left_out}"),
                      highlight=False)
        console.print(narrow)
    else:
        print_records(console, _records(lead, varying, tail, rows))


def _span(texts: list[str]) -> str:
    values = sorted(set(texts), key=float)
    return values[0] if len(values) == 1 else f"{values[0]} to {values[-1]}"


def _merged(reasons: list[str]) -> str:
    """Reasons alike but for their numbers as one: each number that differs as its range."""
    numbers = [NUMBER.findall(reason) for reason in reasons]
    words = NUMBER.split(reasons[0])
    spans = [_span([found[i] for found in numbers]) for i in range(len(numbers[0]))]
    return "".join(w + (spans[i] if i < len(spans) else "") for i, w in enumerate(words))


def infeasible_line(reasons: Sequence[Optional[str]]) -> str:
    """`N layouts infeasible (cost model: <the most common reasons>)`: every layout the cost
    model ruled out, counted in one line; reasons alike but for their numbers count as one."""
    groups: dict[str, list[str]] = {}
    for reason in reasons:
        text = reason or "no reason recorded"
        groups.setdefault(NUMBER.sub("#", text), []).append(text)
    ordered = sorted(groups.values(), key=len, reverse=True)
    named = [(f"{len(g)}: " if len(ordered) > 1 else "") + _merged(g)
             for g in ordered[:REASONS_SHOWN]]
    others = sum(len(g) for g in ordered[REASONS_SHOWN:])
    if others:
        named.append(f"{others} for other reasons")
    noun = "layout" if len(reasons) == 1 else "layouts"
    return f"{len(reasons)} {noun} infeasible, never run (cost model: {'; '.join(named)})"
