"""Every figure README.md quotes that a command prints, checked against that command.

The table below is (the README's text with its figure, the command that prints the figure,
where it sits in the output). `paratune` commands run in-process. The search figures are
those `benchmarks/search_efficiency.py` printed (over an hour of runs) as the tables of
docs/benchmarks.md: they are read from those tables, the command's recorded output, and the
measured landscapes' noise and size from the recorded sweeps themselves
(`benchmarks/landscapes/*.json`, written by `benchmarks/measure_landscape.py`).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

import pytest
from test_costmodel_doc import json_of_command

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
sys.path.insert(0, str(ROOT / "benchmarks"))

PEERS = ("deephyper-cbo", "optuna", "hyperopt")
EVERY_PEER = ("random", "grid", *PEERS)
COST_MODEL_SECTIONS = ("### Cost-model landscapes",
                       "### Mixture-of-experts and long-context landscapes")


@lru_cache(maxsize=None)
def search_table(section: str) -> dict[tuple[str, str], dict[str, str]]:
    """The first table with a searcher column after `section`'s heading in docs/benchmarks.md:
    (landscape, searcher) -> the row by column name."""
    lines = BENCHMARKS.read_text().splitlines()
    start = lines.index(section)
    header = next(i for i in range(start, len(lines))
                  if lines[i].startswith("| landscape | searcher |"))
    names = [c.strip() for c in lines[header].strip("|").split("|")]
    rows = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(names, (c.strip() for c in line.strip("|").split("|"))))
        rows[(row["landscape"], row["searcher"])] = row
    return rows


def median_trials(row: dict[str, str]) -> float:
    value = row["trials to 3%: median"]
    return float("inf") if value == "-" else float(value)


def number(value: float) -> str:
    return f"{value:g}"


def span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return number(low) if low == high else f"{number(low)}-{number(high)}"


def readme_cells(name: str, column: str, searchers: tuple[str, ...], section: str) -> list[str]:
    table = search_table(section)
    return [table[(name, s)][column] for s in searchers]


@lru_cache(maxsize=None)
def landscape(name: str):
    from tabulated import TabulatedLandscape

    return TabulatedLandscape(ROOT / "benchmarks" / "landscapes" / f"{name}.json", seed=0)


def model_rank_of_the_measured_best(name: str) -> int:
    table = landscape(name)
    ranked = sorted(table.candidates, key=lambda c: -table.cost.estimate(c).tokens_per_s)
    return ranked.index(max(table.truth, key=table.truth.get)) + 1


def cost_model_medians() -> dict[str, tuple[float, float]]:
    """Each cost-model landscape's cost-guided median and the best peer's."""
    out = {}
    for section in COST_MODEL_SECTIONS:
        table = search_table(section)
        for landscape_name in dict.fromkeys(name for name, _ in table):
            out[landscape_name] = (median_trials(table[(landscape_name, "cost-guided")]),
                                   min(median_trials(table[(landscape_name, p)]) for p in PEERS))
    return out


def fast_and_slow() -> tuple[dict, dict]:
    medians = cost_model_medians()
    fast = {k: v for k, v in medians.items() if v[0] <= 5}
    return fast, {k: v for k, v in medians.items() if v[0] > 5}


MEASURED = "### Measured landscapes"
MOE = "### A measured mixture-of-experts landscape"
SEARCH = "benchmarks/search_efficiency.py --seeds 20 (docs/benchmarks.md)"
SWEEP = "benchmarks/measure_landscape.py (benchmarks/landscapes/{}.json)"
TINY = "paratune estimate --model tiny --cluster cpu-local --gpus 2"

# (README text with "{}" where each figure goes, the command, where the figures are, the figures)
FIGURES = [
    ("the {}-parameter", TINY, "params", lambda: [f"{json_of_command(TINY)['params'] / 1e6:.1f}M"]),
    ("the built-in trainer's {}-layout grid, each layout measured {} times, {} run-to-run noise",
     SWEEP.format("cpu-tiny-grid"), "layouts; tokens_per_s per layout; median relative std",
     lambda: [len(landscape("cpu-tiny-grid").candidates),
              span([len(landscape("cpu-tiny-grid").measured(c))
                    for c in landscape("cpu-tiny-grid").candidates]),
              f"{landscape('cpu-tiny-grid').noise():.1%}"]),
    ("it reaches the best at its {} trial", SEARCH, "cpu-tiny-grid, cost-guided, trials to 3%",
     lambda: [{"1": "first"}.get(readme_cells("cpu-tiny-grid", "trials to 3%: median",
                                              ("cost-guided",), MEASURED)[0], "?")]),
    ("names a layout within 3% of the best in {} of 20 seeds, as the peers do", SEARCH,
     "cpu-tiny-grid, cost-guided and the peers, winner ok",
     lambda: [span([int(w.split("/")[0]) for w in readme_cells(
         "cpu-tiny-grid", "winner ok", ("cost-guided", *PEERS), MEASURED)])]),
    ("need a median of {} trials to get within 3%", SEARCH,
     "cpu-tiny-grid, the peers, trials to 3%: median",
     lambda: [span([float(v) for v in readme_cells("cpu-tiny-grid", "trials to 3%: median", PEERS,
                                                   MEASURED)])]),
    ("with 6-step trials ({} noise) it names the best in {} of 20 seeds, the peers in {},",
     f"{SWEEP.format('cpu-tiny-grid-short')}; {SEARCH}",
     "median relative std; cpu-tiny-grid-short, cost-guided and every peer, winner ok",
     lambda: [f"{landscape('cpu-tiny-grid-short').noise():.0%}",
              readme_cells("cpu-tiny-grid-short", "winner ok", ("cost-guided",), MEASURED)[0]
              .split("/")[0],
              span([int(w.split("/")[0]) for w in readme_cells(
                  "cpu-tiny-grid-short", "winner ok", EVERY_PEER, MEASURED)])]),
    ("where the cost model ranks the best {}th of {}, it needs {} trials against the peers' {}",
     f"{SWEEP.format('cpu-moe-grid')} and its spec's cost model; {SEARCH}",
     "the measured best's place in the model's ranking; cpu-moe-grid, trials to 3%: median",
     lambda: [model_rank_of_the_measured_best("cpu-moe-grid"),
              len(landscape("cpu-moe-grid").candidates),
              readme_cells("cpu-moe-grid", "trials to 3%: median", ("cost-guided",), MOE)[0],
              span([float(v) for v in readme_cells("cpu-moe-grid", "trials to 3%: median", PEERS,
                                                   MOE)])]),
    ("it needs a median of {} trials on {} of {}, and {} on the other three", SEARCH,
     "the cost-model landscapes, cost-guided, trials to 3%: median",
     lambda: [span([v[0] for v in fast_and_slow()[0].values()]), len(fast_and_slow()[0]),
              len(cost_model_medians()), span([v[0] for v in fast_and_slow()[1].values()])]),
    ("where the best of DeepHyper, Optuna and HyperOpt needs {}.", SEARCH,
     "the other three, the best peer's trials to 3%: median",
     lambda: [span([v[1] for v in fast_and_slow()[1].values()])]),
]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("text,command,field,figures", FIGURES, ids=[f[2] for f in FIGURES])
def test_each_readme_figure_is_what_its_command_prints(text, command, field, figures):
    quoted = text.format(*figures())
    assert quoted in flat(README.read_text()), \
        f"README.md should read {quoted!r} ({command} → {field})"


def test_the_other_three_cost_model_landscapes_are_the_ones_the_readme_names():
    _, slow = fast_and_slow()
    assert set(slow) == {"llama3-405b-128k-interactions", "mixtral-8x22b-perturbed",
                         "llama3-405b-32k-perturbed"}
    readme = flat(README.read_text())
    assert "(Llama 3 405B at 128K with hidden quirks; Mixtral 8x22B and Llama 3 405B at 32K " \
           "with a hidden factor per knob value)" in readme
