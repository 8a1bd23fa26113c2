"""The published measurements (benchmarks/measured/) replayed as search landscapes: where one
source measured several layouts of one model on one cluster, a trial of a layout answers with
exactly what the source published, as `space.kind: list` over the measured layouts would.

A landscape is validate_costmodel.py's: one source's rows of one model on one cluster at one
GPU count, sequence length, precision and framework (published_rows.py `PricedRow.landscape`).
The GPU count stays fixed because a `space.kind: list` campaign has one world size (dp follows
from it), and because the searchers that think in knobs (Optuna, HyperOpt, DeepHyper) do not
see the GPU count: layouts that differ only in it are one point to them (DeepHyper CBO raises
on such a list). So llm-foundry's grids, which vary the GPU count with the layout and hold at
most 2 layouts at one count, give no landscape; the corpus gives five (four of DLPerf's, one of
Megatron-Bridge). At one GPU count tokens/s and tokens/s per GPU rank the layouts alike.

A layout's throughput is the published row's (repeated rows of one layout, as across README
revisions or MLPerf seeds: their median); every layout ran, so the best is the best of all of
them, a layout the memory model prunes included. The searchers see the cost model of the
landscape's first row in file order, which wrote none of these figures. Superseded rows are left
out (measured_corpus.py); a landscape keeps 3 distinct layouts or more.

Run: .venv/bin/python benchmarks/corpus_landscapes.py   (each landscape: layouts, GPU counts)
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import measured_corpus
from measured_corpus import SUPERSEDED
from validation_report import SHORT

from orchestrator.costmodel.estimate import CostModel
from orchestrator.costmodel.published_rows import PricedRow, price_row
from orchestrator.result import TrialResult
from orchestrator.space import Layout

MIN_LAYOUTS = 3


@dataclass
class CorpusLandscape:
    name: str
    source: str  # the file in benchmarks/measured/
    rows: dict[Layout, list[PricedRow]]  # layout -> its published rows
    cost: CostModel = field(init=False)
    candidates: list[Layout] = field(init=False)
    truth: dict[Layout, float] = field(init=False)  # tokens/s

    def __post_init__(self) -> None:
        self.cost = next(iter(self.rows.values()))[0].cost
        self.candidates = list(self.rows)
        self.truth = {config: statistics.median(r.measured_tokens_per_s_per_gpu for r in rows)
                          * config.world_size for config, rows in self.rows.items()}

    def run(self, layout: Layout, trial_id: str) -> TrialResult:
        """The published throughput of the layout, the same for every trial."""
        tokens_per_s = self.truth[layout]
        tokens_per_step = layout.global_batch_size() * self.cost.model.seq_len
        return TrialResult(status="ok", tokens_per_s=tokens_per_s,
                           tokens_per_s_per_gpu=tokens_per_s / layout.world_size,
                           world_size=layout.world_size,
                           step_time_s=tokens_per_step / tokens_per_s)


def _name(source: str, landscape: str) -> str:
    """The source's short name and the landscape, without the framework's parenthesised
    detail, with `|` (a table's separator) as `·` and no comma (the benchmark's list
    separator)."""
    model, *rest, framework, gpus = landscape.split(" | ")
    return " · ".join([SHORT[source], model.replace(",", ""), *rest, framework.split(" (")[0],
                       gpus])


@lru_cache(maxsize=1)
def corpus_landscapes() -> dict[str, CorpusLandscape]:
    """Every landscape of 3 layouts or more, by name, in source then landscape order."""
    by_landscape: dict[tuple[str, str], dict[Layout, list[PricedRow]]] = \
        defaultdict(lambda: defaultdict(list))
    for row in measured_corpus.rows():
        if row.role == SUPERSEDED:
            continue
        priced = price_row(row.values)
        if isinstance(priced, PricedRow):
            by_landscape[(row.file, priced.landscape)][priced.config].append(priced)
    found = {}
    for (source, landscape), rows in sorted(by_landscape.items()):
        if len(rows) >= MIN_LAYOUTS:
            name = _name(source, landscape)
            assert name not in found, f"two landscapes named {name!r}"
            found[name] = CorpusLandscape(name, source, dict(rows))
    return found


def main() -> None:
    for name, land in corpus_landscapes().items():
        print(f"{name}: {len(land.candidates)} layouts, "
              f"{sum(map(len, land.rows.values()))} rows")


if __name__ == "__main__":
    main()
