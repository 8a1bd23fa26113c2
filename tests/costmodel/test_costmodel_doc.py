"""docs/costmodel.md: every figure in its tables is re-printed by the command written next to it.

A figure row is a table row with a `paratune ...` command cell and a field cell. The command
runs in-process with `--json`; the field selects a value from its output:
`rows[world_size=1024,scheme=amsp].mfu`, `plan`, `best.config.micro_batch_size`, or a ratio
`rows[1].tokens_per_s_per_gpu / rows[0].tokens_per_s_per_gpu`. The ParaTune cell is written as
the command prints it: `54.0%` (a fraction as a percentage, one decimal), `0.572` (three
decimals), `(1,1,1,1,8,1)` (sharding factors) or an integer.

The two range tables ("Settings the papers do not give" and "What the unvalidated expert
overlap moves") report figures no single command prints (a plan row with every layer
recomputed, a constant set apart from its default): their rows are recomputed by the
published-figure tests' own functions.
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
from orchestrator.costmodel.constants_provenance import figure

ROOT = Path(__file__).resolve().parent.parent.parent
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
def json_of_command(command: str) -> dict:
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
    values = [float(t) if re.fullmatch(r"[\d.]+", t) else select(json_of_command(command), t)
              for t in terms]
    result = values[0]
    for v in values[1:]:
        result /= v
    return result


def as_printed(value, like: str) -> str:
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
    assert as_printed(value_of(command, field), written) == written, f"{what}: {command} → {field}"


def table(header_start: str) -> list[list[str]]:
    """The rows (cells) of the doc's table whose header line starts with `header_start`."""
    lines = DOC.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header_start)]
    rows = []
    for line in lines[starts[0] + 2:] if len(starts) == 1 else []:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def ranges() -> dict[str, tuple]:
    """Each ranged figure's (favourable, least favourable) ends, as its test computes them."""
    from test_costmodel_cp import LLAMA3_FAVOURABLE, LLAMA3_ROWS, NEMO_LEAST_FAVOURABLE, llama3
    from test_costmodel_papers import (
        amsp_recomputing_every_layer,
        at_1024,
        compare,
        deepseek_v3_mfu,
        run_json,
    )

    def amsp_30b(m: int, column: str):
        fewest = compare("30b", "--nodes", "8", "--set", f"scale.global_batch_size={64 * m}")
        every = amsp_recomputing_every_layer("30b", "scale.nodes=8",
                                             f"scale.global_batch_size={64 * m}")
        return lambda: (fewest[(64, "amsp")][column], every[column])

    nemo = str(ROOT / "examples" / "nemo-llama2-long-context.yaml")
    out = {
        "amsp-30b-1024-amsp-mfu": lambda: (
            at_1024("30b")["amsp"]["mfu"], amsp_recomputing_every_layer("30b")["mfu"]),
        "nemo-llama2-128k-tflops": lambda: (
            run_json("estimate", nemo)["tflops_per_gpu"],
            run_json("estimate", nemo, *NEMO_LEAST_FAVOURABLE)["tflops_per_gpu"]),
        "deepseek-v3-mfu": lambda: (
            deepseek_v3_mfu(None),
            deepseek_v3_mfu(None, "space.activation_checkpointing=[full]",
                            "space.recompute_num_layers=[null]")),
    }
    for m in (1, 8):
        for column, key in (("all", "mfu_full_overlap"), ("none", "mfu_without_overlap")):
            out[f"amsp-tablev-30b-m{m}-{column}"] = amsp_30b(m, key)
    for row in LLAMA3_ROWS:
        layout = row.values[1:5]
        out[row.id] = (lambda layout=layout: (
            llama3(*layout, settings=LLAMA3_FAVOURABLE)["tflops_per_gpu"],
            llama3(*layout)["tflops_per_gpu"]))
    return out


RANGES_HEADER = "| figure | published | not published"


def test_every_range_row_is_recomputed():
    ids = [row[0].strip("`") for row in table(RANGES_HEADER)]
    assert ids and set(ids) == set(ranges())
    for figure_id in ids:
        figure(figure_id)  # a published figure with an id


@pytest.mark.parametrize("row", table(RANGES_HEADER), ids=lambda row: row[0].strip("`"))
def test_each_range_matches_what_its_test_computes(row):
    figure_id, _, _, favourable, least_favourable = row[0].strip("`"), *row[1:5]
    computed = ranges()[figure_id]()
    assert (as_printed(computed[0], favourable), as_printed(computed[1], least_favourable)) == \
        (favourable, least_favourable)


def test_the_expert_overlap_range_matches_what_the_test_computes():
    from test_costmodel_papers import deepseek_v3_mfu

    [row] = table("| figure | published | constant | at 0 |") or [["missing"]]
    assert row[:3] == ["`deepseek-v3-mfu`", "38.6%", "`overlap_expert_comm`"]
    computed = [deepseek_v3_mfu(x) for x in (0.0, None, 1.0)]
    assert [as_printed(v, written) for v, written in zip(computed, row[3:])] == row[3:]


def _gap(what_starts: str) -> str:
    """The shown ParaTune figure of the row whose label starts `what_starts`, against its
    published one, as the prose prints it (+2.9%, −25.1%)."""
    [(_, shown, published)] = [(w, s, p) for w, p, s in _labelled() if w.startswith(what_starts)]
    gap = float(shown) / float(published) - 1
    return f"{'+' if gap >= 0 else '−'}{abs(100 * gap):.1f}%"


def _labelled() -> list[tuple[str, str, str]]:
    """(what, published, shown) of each figure row with a numeric published value."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 5 and cells[3].startswith("`paratune "):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_the_llama3_prose_gaps_are_the_tables():
    """"Misses" under Llama 3 405B quotes each row's gap to Table 4, at the check's settings, at
    the favourable end and with selective recompute at 8 virtual stages."""
    text = " ".join(DOC.read_text().split())
    for setting, fmt in (("full recompute, 2 virtual stages: the check", "low ({}, {}, {})"),
                         ("the model's best of the unpublished settings",
                          "the favourable ends are {}, {} and {}"),
                         ("selective recompute, 8 virtual stages", "they print {}, {} and {}")):
        gaps = [_gap(f"{rows}, {setting}") for rows in (
            "8,192 GPUs, CP 1, seq 8,192", "16,384 GPUs, CP 1, seq 8,192",
            "16,384 GPUs, CP 16, seq 131,072")]
        assert fmt.format(*gaps) in text, (setting, gaps)


def test_the_long_sequence_prose_gaps_are_the_tables():
    """Under NeMo's long-sequence table: the rows without recompute within 10%, and the
    misses the GEMM shape rule leaves."""
    text = " ".join(DOC.read_text().split())
    within = [_gap(f"{k}, {g} GPUs, TP 4, DP 8, CP {c}, no recompute")
              for k, g, c in (("64K", 64, 2), ("128K", 128, 4), ("256K", 256, 8))]
    assert f"64K {within[0]}, 128K {within[1]} and 256K {within[2]}" in text
    high = _gap("32K, 32 GPUs, TP 2, DP 8, CP 2, no recompute").lstrip("+")
    assert f"the model is {high} high" in text
    low = [_gap(f"{k}, {g} GPUs, TP 8, DP 4, CP {c}, no recompute").lstrip("−")
           for k, g, c in (("512K", 512, 16), ("1024K", 1024, 32))]
    assert f"the model is {low[0]} and {low[1]} low" in text
