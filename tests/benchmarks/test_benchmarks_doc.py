"""docs/benchmarks.md's search tables on measured landscapes are what benchmarks/search_efficiency.py
wrote: each table follows a marker naming the JSON the benchmark's `--table-json` wrote, and
every row must read as the benchmark formats that JSON's figures (the overhead column aside, a
timing). The JSON itself must still be what the code gives: one small published landscape is
run again here, on every seed, and must give the same figures.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
sys.path.insert(0, str(ROOT / "benchmarks"))

import search_efficiency  # noqa: E402

MARKER = re.compile(r"<!-- search_efficiency\.py (table|by_searcher): (\S+?\.json)(?:, (.+?))? -->")
TIMED = "overhead ms"
# The sections whose tables replay measured landscapes: every table there needs a marker.
MEASURED_SECTIONS = ("### Measured landscapes", "### A measured mixture-of-experts landscape",
                     "### A measured long-context landscape",
                     "### Published measurements replayed")
# The smallest published landscape, run again in full.
RERUN = "Megatron-Bridge · gpt-oss-120b (36 layers seq 4096) · b200-180g · bf16 · " \
        "NeMo / Megatron-Bridge · 64 GPUs"


@lru_cache(maxsize=None)
def report(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def marked_tables() -> list[tuple[str, str, str | None, list[str], list[str]]]:
    """(what, JSON path, family, header, rows) of each table that follows a marker."""
    lines = BENCHMARKS.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        match = MARKER.fullmatch(line.strip())
        if not match:
            continue
        start = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("|"))
        end = next((j for j in range(start, len(lines)) if not lines[j].startswith("|")),
                   len(lines))
        found.append((match[1], match[2], match[3], cells(lines[start]),
                      lines[start + 2:end]))
    return found


def unmarked_measured_tables() -> list[str]:
    """The header line of every search table in a measured section with no marker above it."""
    lines = BENCHMARKS.read_text().splitlines()
    missing, section, marked = [], None, False
    for i, line in enumerate(lines):
        if line.startswith("#"):
            section = line
        if MARKER.fullmatch(line.strip()):
            marked = True
        elif line.startswith("| landscape | searcher |") or line.startswith("| searcher |"):
            if section in MEASURED_SECTIONS and not marked:
                missing.append(f"{section}: line {i + 1}")
            marked = False
    return missing


def without_timing(line: str, header: list[str]) -> list[str]:
    return [c for name, c in zip(header, cells(line)) if name != TIMED]


def test_every_measured_table_names_the_json_it_was_written_from():
    assert MARKER.pattern and marked_tables(), "docs/benchmarks.md has no marked search table"
    assert unmarked_measured_tables() == []


@pytest.mark.parametrize("what,path,family,header,rows",
                         marked_tables() or [("table", "", None, [], [])])
def test_each_marked_table_reads_as_the_benchmark_wrote_it(what, path, family, header, rows):
    data = report(path)
    if what == "table":
        assert header == cells(search_efficiency.TABLE_HEADER)
        entries = {(t["landscape"], t["searcher"]): t for t in data["table"]}
        assert rows, f"{path}: an empty table"
        for line in rows:
            key = tuple(cells(line)[:2])
            assert key in entries, f"{key} is not in {path}"
            expected = search_efficiency.table_line(entries[key])
            assert without_timing(line, header) == without_timing(expected, header), key
    else:
        assert header == cells(search_efficiency.SUMMARY_HEADER)
        expected = [search_efficiency.summary_line(t) for t in data["by_searcher"]
                    if t["family"] == family]
        assert rows == expected


def test_a_published_landscape_run_again_gives_the_recorded_figures():
    data = report("docs/search_measured.json")
    first, last = data["settings"]["seeds"]
    recorded = [t for t in data["table"] if t["landscape"] == RERUN]
    assert {t["searcher"] for t in recorded} >= {"cost-guided", "random", "optuna"}
    for entry in recorded:
        runs = [search_efficiency.run_one((RERUN, entry["searcher"], seed,
                                           data["settings"]["noise"],
                                           data["settings"]["max_trials"], 0.0))
                for seed in range(first, last)]
        (again,) = search_efficiency.summarize(runs)
        assert {k: v for k, v in again.items() if k != "overhead_ms"} == \
            {k: v for k, v in entry.items() if k != "overhead_ms"}, entry["searcher"]


def test_a_parallel_quirks_landscape_run_again_gives_the_recorded_figures():
    """The generated landscapes that move ep, cp and interleaving: cost-guided on the smaller
    one, every seed, gives the recorded figures."""
    data = report("docs/search_parallel_quirks.json")
    first, last = data["settings"]["seeds"]
    name = "llama3-405b-32k-parallel-quirks"
    (entry,) = [t for t in data["table"] if t["landscape"] == name
                and t["searcher"] == "cost-guided"]
    runs = [search_efficiency.run_one((name, "cost-guided", seed, data["settings"]["noise"],
                                       data["settings"]["max_trials"], 0.0))
            for seed in range(first, last)]
    (again,) = search_efficiency.summarize(runs)
    assert {k: v for k, v in again.items() if k != "overhead_ms"} == \
        {k: v for k, v in entry.items() if k != "overhead_ms"}


def test_the_generated_run_agrees_with_the_parallel_quirks_run_where_they_overlap():
    """docs/search_generated.json (every generated landscape) and search_parallel_quirks.json
    ran the same code on the same seeds: where both hold a landscape and searcher, the figures
    are the same (overhead aside, a timing)."""
    generated, quirks = report("docs/search_generated.json"), report(
        "docs/search_parallel_quirks.json")
    assert generated["settings"]["seeds"] == quirks["settings"]["seeds"]
    assert generated["settings"]["noise"] == quirks["settings"]["noise"]
    entries = {(t["landscape"], t["searcher"]): t for t in quirks["table"]}
    shared = [t for t in generated["table"] if (t["landscape"], t["searcher"]) in entries]
    assert shared, "no landscape and searcher in both"
    for entry in shared:
        other = entries[entry["landscape"], entry["searcher"]]
        assert {k: v for k, v in entry.items() if k != "overhead_ms"} == \
            {k: v for k, v in other.items() if k != "overhead_ms"}, entry["landscape"]


def test_the_generated_sections_prose_figures_are_the_jsons():
    """The sentences under "Generated landscapes, as the searchers are now" quote trials run,
    trials to 3% and winners named right: each must be the JSON's figure."""
    text = BENCHMARKS.read_text()
    rows = {t["landscape"]: t for t in report("docs/search_generated.json")["table"]
            if t["searcher"] == "cost-guided"}

    def figure(value: float) -> str:
        return f"{value:g}"

    trials = re.search(r"on `frontier-175b` (\S+) \(34 before the repeat\s+cap and its GPU-hour "
                       r"price\), `frontier-1t` (\S+) \(60\), `deepseek-v3` (\S+) \(60\)", text)
    assert trials, "the trials-run sentence moved"
    assert trials.groups() == tuple(figure(rows[n]["trials_run"])
                                    for n in ("frontier-175b", "frontier-1t", "deepseek-v3"))
    moved = re.search(r"`mixtral-8x22b-perturbed` (\S+) \(8\), `llama3-405b-32k-perturbed` (\S+) "
                      r"\(8\)", text)
    assert moved.groups() == (figure(rows["mixtral-8x22b-perturbed"]["median"]),
                              figure(rows["llama3-405b-32k-perturbed"]["median"]))
    right = sum(t["winner_ok"] for t in rows.values())
    seeds = sum(t["seeds"] for t in rows.values())
    assert f"within 3% of the best in {right} of {seeds} runs. The {seeds - right} misses" in text
    named = re.findall(r"on `(llama3-405b-[\w-]+)` \((\d+)/20;", text)
    assert len(named) == 2, named
    for name, said in named:
        assert int(said) == rows[name]["winner_ok"], name


def test_the_parallel_quirks_prose_figures_are_the_jsons():
    """The sentence "Against the targets" under "Generated landscapes whose truth moves ep, cp
    and interleaving" quotes cost-guided's, the oracle's and the best peer's trials to 3%."""
    text = " ".join(BENCHMARKS.read_text().split())
    rows = {(t["landscape"], t["searcher"]): t
            for t in report("docs/search_parallel_quirks.json")["table"]}
    peers = ("random", "grid", "deephyper-cbo", "optuna", "hyperopt")
    names = {"optuna": "Optuna", "hyperopt": "HyperOpt", "deephyper-cbo": "DeepHyper CBO",
             "random": "random", "grid": "grid"}

    def figure(value: float) -> str:
        return f"{value:g}"

    for landscape in ("deepseek-v3-parallel-quirks", "llama3-405b-32k-parallel-quirks"):
        said = re.search(rf"`{landscape}` (?:cost-guided |it )needs (\S+) \(p90 (\S+)\) against the "
                         r"oracle's (\S+) \(p90 (\S+)\)(?:,[^,]*,)? and the best peer's (\S+) "
                         r"\(([^)]+)\)", text)
        assert said, landscape
        guided, oracle = rows[landscape, "cost-guided"], rows[landscape, "structure-oracle"]
        best = min(rows[landscape, p]["median"] for p in peers)
        leaders = ", ".join(names[p] for p in peers if rows[landscape, p]["median"] == best)
        assert said.groups() == (figure(guided["median"]), figure(guided["p90"]),
                                 figure(oracle["median"]), figure(oracle["p90"]),
                                 figure(best), leaders), landscape
