"""The tables a person reads, at 80 and 200 columns: the closing summary, `ls`, `plan` and
`run --dry-run`. Whatever tells two layouts apart shows whole (a column per knob that varies),
nothing is cut with an ellipsis, numbers are written out, the layouts the cost model ruled out
fold into one counted line, rows come best first by the objective, and state names are whole.

Each rendering is also kept under tests/fixtures/tables/; after an intended change, regenerate
them with `UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cli/test_tables.py` and read the diff.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from orchestrator.cli import common
from orchestrator.cli.campaign_table import SIMULATED_NOTE, number, print_table
from orchestrator.cli.layout_table import split_knobs, value_text
from orchestrator.cli.live_display import CampaignProgress
from orchestrator.record.campaign import CampaignSummary
from orchestrator.record.journal import TrialRecord
from orchestrator.result import TrialResult
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec

GOLDEN = Path(__file__).parent.parent / "fixtures" / "tables"
EXAMPLES = Path(__file__).parent.parent.parent / "examples"
WIDTHS = (80, 200)
E_NOTATION = re.compile(r"\d[eE][+-]?\d")
STATES = ("queued", "running", "finished", "failed", "cancelled", "refused")


def render(width: int, draw) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    draw(console)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing; create it with UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{name} renders differently from {path}; if the change is intended, regenerate with "
        f"UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cli/test_tables.py\n{text}")


def check_readable(text: str, width: int, one_line: str = "export it:") -> None:
    """`one_line` starts the lines printed whole for the terminal to wrap (a command to copy,
    a reason), which may be wider than the console."""
    assert "…" not in text, text
    assert not E_NOTATION.search(text), text
    table = [line for line in text.splitlines() if not line.startswith(one_line)]
    assert max(map(len, table)) <= width, text


def terminal_rows(text: str) -> list[list[str]]:
    """The cells of the table's body: the lines after its header rule, split on spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    body = []
    for line in lines[start + 1:]:
        if "  " not in line.strip():  # a line of prose below the table
            break
        body.append(line.split())
    return body


def check_layouts_whole(rows: list[list[str]], configs: list[Layout]) -> None:
    """Each row holds every varying knob's value of its layout as a whole cell."""
    varying, _ = split_knobs(configs)
    assert varying
    for cells, config in zip(rows, configs, strict=True):
        params = config.to_params()
        for name in varying:
            assert value_text(params[name]) in cells, (name, cells, config.key())


# The closing summary: layouts that differ only in activation checkpointing, an OOM, a trial
# still running and 68 layouts the cost model pruned.

def summary_spec(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tables", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 1, "global_batch_size": 32}, "backend": {"kind": "simulated"},
        "tracking": {"enabled": False}}))
    return load_spec(path)


def mixed_records() -> list[TrialRecord]:
    """Three measured layouts, an OOM, a trial still running and 68 pruned layouts."""
    layouts = [dict(zero_stage=2, micro_batch_size=4, grad_accum_steps=1, activation_checkpointing=ac)
               for ac in ("none", "selective", "full")]
    measured = [(layouts[0], 41_250.5), (layouts[1], 53_170.25), (layouts[2], 47_009.0)]
    records = []
    for i, (knobs, tokens) in enumerate(measured, 1):
        record = TrialRecord(f"t{i:04d}", Layout(dp=8, **knobs))
        record.result = TrialResult(status="ok", tokens_per_s=tokens, step_time_s=32 * 4096 / tokens,
                                    peak_memory_gb=61.5 + i, world_size=8)
        records.append(record)
    oom = TrialRecord("t0004", Layout(dp=8, zero_stage=1, micro_batch_size=8,
                                              grad_accum_steps=1))
    oom.result = TrialResult(status="oom", error="CUDA out of memory", world_size=8)
    running = TrialRecord("t0005", Layout(tp=2, dp=4, zero_stage=2, micro_batch_size=4,
                                                  grad_accum_steps=2))
    records += [oom, running]
    for i in range(68):
        pruned = TrialRecord(f"t{i + 6:04d}", Layout(dp=8, micro_batch_size=8,
                                                             grad_accum_steps=1))
        predicted = 81.25 + i * 2.5
        pruned.result = TrialResult(status="infeasible", world_size=8,
                                    error=f"predicted {predicted:.2f} GB per device > 80.00 GB "
                                          "capacity")
        records.append(pruned)
    return records


@pytest.mark.parametrize("width", WIDTHS)
def test_summary(tmp_path, width):
    spec = summary_spec(tmp_path)
    records = mixed_records()
    summary = CampaignSummary("tables", records, best=records[1])

    def draw(console: Console) -> None:
        CampaignProgress(console, spec).print_summary(console, summary)

    text = render(width, draw)
    check_readable(text, width)
    rows = terminal_rows(text)
    assert [cells[0] for cells in rows] == ["t0002", "t0003", "t0001", "t0004", "t0005"], text
    check_layouts_whole(rows, [records[i].config for i in (1, 2, 0, 3, 4)])
    assert {"none", "selective", "full"} <= {cell for cells in rows for cell in cells}
    assert "53,170" in text and "running" in rows[-1]
    assert text.count("infeasible") == 1 and ("68 layouts infeasible, never run (cost model: "
                                              "predicted 81.25 to 248.75 GB per device > 80.00 "
                                              "GB capacity)") in " ".join(text.split()), text
    assert "t0006" not in text
    golden = [line for line in text.splitlines(keepends=True) if not line.startswith("export it")]
    check_golden(f"summary-{width}", "".join(golden))


# `paratune ls`: the objects the campaign service returns.

CAMPAIGNS = [
    {"name": "frontier-175b", "owner": "me", "state": "finished", "trials": 30,
     "max_trials": 30, "running": 0, "gpu_hours": 1234.5, "gpu_hours_budget": 5000,
     "best": {"metric": "tokens_per_s", "value": 713_872.4, "trial_id": "t0010"}},
    {"name": "quickstart-with-a-long-campaign-name", "owner": "me", "state": "running",
     "trials": 3, "max_trials": 6, "running": 1, "gpu_hours": 0.25, "best": None},
    {"name": "quota", "owner": "me", "state": "refused", "trials": 0, "max_trials": 6,
     "running": 0, "gpu_hours": 0.0,
     "reason": "user me may run 2 campaigns at once; 2 are running (frontier-175b, quickstart)"},
    {"name": "stopped", "owner": "me", "state": "cancelled", "trials": 0, "max_trials": 6,
     "running": 0, "gpu_hours": 0.0},
    {"name": "rehearsal", "owner": "me", "state": "finished", "trials": 12, "max_trials": 12,
     "running": 0, "gpu_hours": 6770.4, "simulated": True,
     "best": {"metric": "tokens_per_s", "value": 53_170.0, "trial_id": "t0003"}},
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("owners", ["one", "two"])
def test_ls(width, owners):
    found = [dict(c) for c in CAMPAIGNS]
    if owners == "two":
        found[1]["owner"] = "someone-else"
    text = render(width, lambda console: print_table(console, found))
    check_readable(text, width, one_line="quota: ")
    words = text.split()
    for c in found:
        assert c["state"] in words, (c["state"], text)
    assert not re.search(r"\b(" + "|".join(s[:-1] for s in STATES) + r")\b", text), text
    assert "713,872" in text and "1,234 / 5,000" in text and "2 are running" in text
    assert "6,770 sim" in text and SIMULATED_NOTE in text  # a rehearsal's hours, apart
    assert ("someone-else" in text) == (owners == "two")
    assert owners == "two" or width == 200 or "owner: me" in text
    check_golden(f"ls-{owners}-owner-{width}", text)


# `paratune plan` and `run --dry-run`: the quickstart's space ranked by the cost model.

@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command,top_k", [("plan", 5), ("dry-run", 10)])
def test_ranking(monkeypatch, width, command, top_k):
    spec = load_spec(EXAMPLES / "quickstart.yaml")
    ranking = common.rank_spec(spec, top_k)

    def draw(console: Console) -> None:
        monkeypatch.setattr(common, "out", console)
        common.print_ranking(spec, ranking)

    text = render(width, draw)
    check_readable(text, width)
    rows = terminal_rows(text)
    assert [cells[0] for cells in rows] == [str(i) for i in range(1, top_k + 1)], text
    assert [float(cells[-4].replace(",", "")) for cells in rows] == sorted(
        (float(number(e.tokens_per_s).replace(",", "")) for e in ranking.top), reverse=True)
    check_layouts_whole(rows, [e.config for e in ranking.top])
    assert "all: tp=1 pp=1 dp=2" in text
    check_golden(f"{command}-{width}", text)


def test_a_min_objective_ranks_the_fastest_step_first(monkeypatch):
    spec = load_spec(EXAMPLES / "quickstart.yaml", ["objective.metric=step_time_s", "objective.mode=min"])
    ranking = common.rank_spec(spec, 6)
    text = render(200, lambda console: (monkeypatch.setattr(common, "out", console),
                                        common.print_ranking(spec, ranking)))
    steps = [float(cells[-5]) for cells in terminal_rows(text)]
    assert steps == sorted(steps), text


def test_numbers_are_written_out():
    assert [number(v) for v in (53_170.2, 0.00001234, 0.0001234, 2.5, 0.0)] == [
        "53,170", "0.00001234", "0.0001234", "2.5", "0"]
