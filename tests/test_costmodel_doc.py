"""docs/costmodel.md: every figure in its tables is re-printed by the command written next to it.

A figure row is a table row with a `paratune ...` command cell and a field cell. The command
runs in-process with `--json`; the field selects a value from its output:
`rows[world_size=1024,scheme=amsp].mfu`, `plan`, `best.config.micro_batch_size`, or a ratio
`rows[1].tokens_per_s_per_gpu / rows[0].tokens_per_s_per_gpu`. The ParaTune cell is written as
the command prints it: `54.0%` (a fraction as a percentage, one decimal), `0.572` (three
decimals), `(1,1,1,1,8,1)` (sharding factors) or an integer.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest

from orchestrator.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "costmodel.md"
FACTORS = ("s0p", "s1p", "s0g", "s1g", "s0os", "s1os")


def figure_rows() -> list[tuple[str, str, str, str]]:
    """(what, shown value, command, field) for each figure row of the doc's tables."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        commands = [i for i, c in enumerate(cells) if c.startswith("`paratune ")]
        if line.startswith("|") and commands and commands[0] + 1 < len(cells):
            i = commands[0]
            rows.append((cells[0], cells[i - 1], cells[i].strip("`"), cells[i + 1].strip("`")))
    return rows


@lru_cache(maxsize=None)
def run(command: str) -> dict:
    args = shlex.split(command)[1:]
    if "--json" not in args:
        args.append("--json")
    buffer = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(buffer):
        code = main(args)
    assert code == 0, f"{command} exited {code}"
    return json.loads(buffer.getvalue())


def select(data, path: str):
    for part in re.findall(r"[^.\[\]]+|\[[^\]]*\]", path):
        if part.startswith("["):
            inner = part[1:-1]
            if inner.isdigit():
                data = data[int(inner)]
                continue
            wanted = dict(kv.split("=") for kv in inner.split(","))
            (data,) = [r for r in data if all(str(r.get(k)) == v for k, v in wanted.items())]
        else:
            data = data[part]
    return data


def value_of(command: str, field: str):
    terms = [t.strip() for t in field.split(" / ")]
    values = [float(t) if re.fullmatch(r"[\d.]+", t) else select(run(command), t) for t in terms]
    result = values[0]
    for v in values[1:]:
        result /= v
    return result


def shown(value, like: str) -> str:
    if isinstance(value, dict):
        return "(" + ",".join(str(value[k]) for k in FACTORS) + ")"
    if like.endswith("%"):
        return f"{value * 100:.1f}%"
    if isinstance(value, (int, str)):
        return str(value)
    return f"{value:.3f}"


ROWS = figure_rows()


def test_the_doc_has_figures_with_commands():
    assert len(ROWS) >= 30


@pytest.mark.parametrize("what,written,command,field", ROWS, ids=[f"{r[0]}|{r[3]}" for r in ROWS])
def test_each_figure_matches_its_command(what, written, command, field):
    assert shown(value_of(command, field), written) == written, f"{what}: {command} → {field}"
