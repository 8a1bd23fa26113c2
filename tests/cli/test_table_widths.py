"""The tables of `plan` (and `plan --compare`), `run` (its closing summary) and `ls` at 60, 80
and 120 columns, over a space where many knobs vary (Qwen3-235B-A22B: experts, context
parallelism, FP8, schedules): no line is wider than the terminal, and every number and word the
data holds is printed whole on one line, so `1,103,942` can never read as `1,103,` over `942`.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from test_tables import render

from orchestrator.cli import common, plan_sweep
from orchestrator.cli.campaign_table import gpu_hours, number, print_table
from orchestrator.cli.layout_table import split_knobs, value_text
from orchestrator.cli.live_display import CampaignProgress, command_lines, key_parts
from orchestrator.record.campaign import CampaignSummary
from orchestrator.record.journal import TrialRecord
from orchestrator.result import TrialResult
from orchestrator.campaign_spec import load_spec

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
WIDTHS = (60, 80, 120)
# A word a cell split leaves behind: a number cut after its comma or point, or one that
# starts with one (`1,103,` / `942`, `406` / `.5`).
NUMBER_FRAGMENT = re.compile(r"^(?:\d[\d,.]*[,.]|[,.]\d[\d,.%]*)$")

MOE_CP_FP8 = {
    "name": "qwen3-235b",
    "model": {"preset": "qwen3-235b-a22b", "seq_len": 32768},
    "cluster": "h100-80g",
    "scale": {"nodes": 64, "global_batch_size": 1024},
    "space": {"tp": [2, 4, 8], "pp": [2, 4], "pipeline_split": ["embedding_loss"],
              "cp": [1, 2, 4], "ep": [4, 8, 16], "etp": [1], "zero_stage": [1],
              "micro_batch_size": [1], "activation_checkpointing": ["selective", "full"],
              "sequence_parallel": [True], "pp_schedule": ["1f1b", "interleaved"],
              "virtual_stages": [1, 2], "precision": ["bf16", "fp8-delayed"]},
    "trial": {"trainer": "megatron-lm"},
    "objective": {"metric": "tokens_per_s"},
    "search": {"algorithm": "grid"},
    "budget": {"max_trials": 8},
    "backend": {"kind": "simulated"},
    "tracking": {"enabled": False},
}


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("spec") / "qwen3.yaml"
    path.write_text(yaml.safe_dump(MOE_CP_FP8))
    return load_spec(path)


@pytest.fixture(scope="module")
def ranking(spec):
    return common.rank_spec(spec, 8)


def left_out(text: str) -> list[str]:
    """The columns a line says a narrow terminal left out of the table."""
    found = re.findall(r"^left out at \d+ columns: (.*)$", text, re.MULTILINE)
    return [name for line in found for name in line.split(", ")]


def check_whole(text: str, width: int, words: set[str]) -> None:
    """No line wider than `width`; each of `words` whole on some line (not glued to a digit,
    letter or another piece of a number); no fragment of a split number anywhere."""
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line.rstrip()) > width]
    assert not too_wide, f"lines over {width} columns: {too_wide}\n{text}"
    assert "…" not in text, text
    for word in sorted(words):
        whole = re.compile(rf"(?<![\w,.%-]){re.escape(word)}(?![\w,.%-])")
        assert any(whole.search(line) for line in lines), f"{word!r} is not whole\n{text}"
    fragments = [w for line in lines for w in line.split() if NUMBER_FRAGMENT.match(w)]
    assert not fragments, f"split numbers {fragments}\n{text}"


def knob_words(configs) -> set[str]:
    """Every value of a knob that varies between the layouts, as the tables write it."""
    varying, _ = split_knobs(configs)
    return {value_text(c.to_params().get(name)) for c in configs for name in varying}


@pytest.mark.parametrize("width", WIDTHS)
def test_plan(monkeypatch, spec, ranking, width):
    def draw(console: Console) -> None:
        monkeypatch.setattr(common, "out", console)
        common.print_ranking(spec, ranking)

    text = render(width, draw)
    shown = [*ranking.top, *ranking.risky]
    assert len(split_knobs([e.config for e in ranking.top])[0]) >= 4  # many knobs vary
    words = knob_words([e.config for e in ranking.top]) | knob_words(
        [e.config for e in ranking.risky])
    assert {"interleaved", "selective", "fp8-delayed", "bf16"} <= words
    dropped = left_out(text)
    assert set(dropped) <= {"TFLOPS/GPU", "HFU"}, text  # never a layout's knob or throughput
    for e in shown:
        words |= {number(e.tokens_per_s), number(e.step_time_s), f"{e.memory_gb:.2f}",
                  f"{e.mfu:.1%}"}
        words |= set() if "TFLOPS/GPU" in dropped else {number(e.tflops_per_gpu)}
        words |= set() if "HFU" in dropped else {f"{e.hfu:.1%}"}
    check_whole(text, width, words | {"tokens/s", "MFU"})


def seven_digit_records(ranking) -> list[TrialRecord]:
    """Measured trials over the plan's layouts (throughputs of seven digits), an OOM, a trial
    still running and two pruned layouts."""
    top, risky = [e.config for e in ranking.top], [e.config for e in ranking.risky]
    configs = [*top[:6], risky[0], risky[-1], *risky[1:3]]
    records = []
    for i, config in enumerate(configs[:6], 1):
        tokens = 1_103_942.4 - i * 67_470.3
        record = TrialRecord(f"t{i:04d}", config)
        record.result = TrialResult(status="ok", tokens_per_s=tokens, world_size=512,
                                    step_time_s=1024 * 32768 / tokens, peak_memory_gb=60 + i / 4)
        records.append(record)
    oom = TrialRecord("t0007", configs[6])
    oom.result = TrialResult(status="oom", error="CUDA out of memory", world_size=512)
    records += [oom, TrialRecord("t0008", configs[7])]
    for i, config in enumerate(configs[8:10], 9):
        pruned = TrialRecord(f"t{i:04d}", config)
        pruned.result = TrialResult(status="infeasible", world_size=512,
                                    error=f"predicted {90 + i:.2f} GB per device > 80.00 GB "
                                          "capacity")
        records.append(pruned)
    return records


@pytest.mark.parametrize("width", WIDTHS)
def test_run_summary(spec, ranking, width):
    records = seven_digit_records(ranking)
    summary = CampaignSummary(spec.name, records, best=records[0])
    text = render(width, lambda console: CampaignProgress(console, spec).print_summary(
        console, summary))
    shown = records[:8]
    words = knob_words([r.config for r in shown]) | {r.trial_id for r in shown}
    assert {"interleaved", "selective", "fp8-delayed", "bf16"} <= words
    assert set(left_out(text)) <= {"step s"}, text
    for r in records[:6]:
        words |= {number(r.result.tokens_per_s), number(r.result.peak_memory_gb)}
        words |= set() if left_out(text) else {number(r.result.step_time_s)}
    check_whole(text, width, words | {"oom", "running", "1,036,472", "766,591"})
    assert "t0009" not in text and "2 layouts infeasible" in text
    pasted = text.replace(" \\\n", " ")  # the command as a shell reads its lines
    assert "paratune best qwen3-235b --format torchrun -o launch.sh\n" in pasted, text


CAMPAIGNS = [
    {"name": "qwen3-235b-a22b-moe-cp-fp8-h100x512", "owner": "infra-planning", "state": "finished",
     "trials": 30, "max_trials": 30, "running": 0, "gpu_hours": 61_234.5,
     "gpu_hours_budget": 100_000,
     "best": {"metric": "tokens_per_s", "value": 1_103_942.4, "trial_id": "t0010"}},
    {"name": "deepseek-v3-rehearsal", "owner": "infra-planning", "state": "running",
     "trials": 3, "max_trials": 200, "running": 4, "gpu_hours": 6_761.0, "simulated": True,
     "best": {"metric": "tokens_per_s", "value": 766_591.0, "trial_id": "t0002"}},
    {"name": "quota", "owner": "someone-else", "state": "refused", "trials": 0, "max_trials": 6,
     "running": 0, "gpu_hours": 0.0,
     "reason": "user someone-else may run 2 campaigns at once; 2 are running"},
    {"name": "stopped", "owner": "infra-planning", "state": "cancelled", "trials": 1,
     "max_trials": 6, "running": 0, "gpu_hours": 0.25,
     "best": {"metric": "step_time_s", "value": 12.75, "trial_id": "t0001"}},
]


@pytest.mark.parametrize("width", WIDTHS)
def test_ls(width):
    found = [dict(c) for c in CAMPAIGNS]
    text = render(width, lambda console: print_table(console, found))
    words = {c["name"] for c in found} | {c["owner"] for c in found} | {c["state"] for c in found}
    words |= {f"{c['trials']}/{c['max_trials']}" for c in found} | {gpu_hours(c) for c in found}
    words |= {number(c["best"]["value"]) for c in found if c.get("best")}
    check_whole(text, width, words | {"1,103,942", "766,591", "61,234 / 100,000", "6,761 sim"})
    assert "2 are running" in " ".join(text.split())


def test_a_command_too_wide_for_the_terminal_is_continued_not_split():
    """`export it:` on a narrow terminal: the command's lines end in ` \\`, so pasted into a
    shell they are the one command, each word whole."""
    command = ("paratune best qwen3-235b --format torchrun --runs-dir '/scratch/plans/a b/runs' "
               "-o launch.sh")
    lines = command_lines("export it:", command, 40)
    assert lines[0] == "export it:" and len(lines) > 2, lines
    assert all(len(line) <= 40 for line in lines), lines
    script = "\n".join(lines[1:]).replace("paratune", "printf '%s\\n'", 1)
    echoed = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            check=True).stdout
    assert echoed.splitlines() == shlex.split(command)[1:]
    assert command_lines("export it:", command, 120) == [f"export it: {command}"]


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_compare(monkeypatch, capsys, width):
    """`plan --compare`: AMSP's sharding factors, e.g. `(8,128,8,128,8,128)`, are never cut."""
    def load(extra: list[str]):
        return load_spec(EXAMPLES / "amsp-llama-13b.yaml", extra)

    monkeypatch.setattr(plan_sweep, "print_json", lambda data: rows.extend(data["rows"]))
    rows: list[dict] = []
    plan_sweep.plan_sweep(load, None, compare=True, as_json=True)
    words = {"(" + ",".join(str(r["factors"][k]) for k in ("s0p", "s1p", "s0g", "s1g", "s0os",
                                                           "s1os")) + ")" for r in rows}
    words |= {f"{r[k]:.1%}" for r in rows for k in ("mfu", "hfu", "mfu_without_overlap")}
    assert "(8,128,8,128,8,128)" in words
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(plan_sweep, "out", console)
    plan_sweep.plan_sweep(load, None, compare=True, as_json=False)
    check_whole(console.export_text(), width, words | {r["scheme"] for r in rows})


@pytest.mark.parametrize("width", WIDTHS)
def test_run_progress_lines(spec, width):
    """The line each trial prints as it ends, while `run` runs: its layout's key whole."""
    records = seven_digit_records(ranking=common.rank_spec(spec, 8))[:7]
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    with CampaignProgress(console, spec) as progress:
        for record in records:
            progress.update("finished", record)
    text = console.export_text()
    words = {r.config.key() for r in records if len(r.config.key()) <= width}
    words |= {part for r in records if len(r.config.key()) > width for part in key_parts(r.config)}
    assert "interleaved2" in words or width == 120
    assert all("-".join(key_parts(r.config)) == r.config.key() for r in records)
    check_whole(text, width, words | {"1,036,472", "766,591", "oom"})
