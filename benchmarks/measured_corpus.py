"""The published measurements in benchmarks/measured/ (README there), and which of them may fit
the cost model's constants and which only check them.

The split is fixed here, by source file, before any figure of the cost model on these rows was
looked at, and every report that scores the model takes it from here:

- `fit`: rows a constant may be chosen against. Megatron-LM's README tables hold the GPT-1T run
  on 3,072 A100s whose 52% the GEMM constants in presets/clusters.py were already chosen
  against, so the whole source fits and none of it checks.
- `superseded`: rows their own source later removed (llm-foundry's table of July 2023); kept
  for provenance, used for nothing.
- `check`: every other source; no constant may be fitted to them, and they are the validation
  figures. A landscape's own calibration (fitting on k of its rows, scoring the rest) takes its
  first k rows in file order: `calibration_rows`.

Run: .venv/bin/python benchmarks/measured_corpus.py  (rows per source and role)
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "measured"
FIT, CHECK, SUPERSEDED = "fit", "check", "superseded"

ROLE_OF_SOURCE = {
    "megatron_lm_readme.csv": FIT,
    "llmfoundry_mpt_2023-07_superseded.csv": SUPERSEDED,
    "calculon_validation_megatron_seqsel.csv": CHECK,
    "dlperf_gpt_v100.csv": CHECK,
    "llmfoundry_mpt.csv": CHECK,
    "mlperf_training_llm.csv": CHECK,
    "nemo_24.07_perf_summary.csv": CHECK,
    "nemo_long_sequence_cp.csv": CHECK,
    "nemo_megatron_bridge_perf_summary.csv": CHECK,
    "nvidia_dgxc_benchmarking.csv": CHECK,
    "torchtitan_benchmarks.csv": CHECK,
}


@dataclass(frozen=True)
class MeasuredRow:
    file: str  # the source file's name, which decides the role
    number: int  # the row's place in its file, from 1
    values: dict[str, str]  # the row as published ("" where nothing was)

    @property
    def role(self) -> str:
        return ROLE_OF_SOURCE[self.file]


def rows(role: str | None = None) -> list[MeasuredRow]:
    """Every row of the corpus (of one role), in file order; a file the split does not name
    is an error, so no new source is scored before it is given a role."""
    found = []
    for path in sorted(FOLDER.glob("*.csv")):
        if path.name not in ROLE_OF_SOURCE:
            raise KeyError(f"{path.name}: no role in ROLE_OF_SOURCE; give it one before use")
        with open(path, newline="") as f:
            found += [MeasuredRow(path.name, n, row)
                      for n, row in enumerate(csv.DictReader(f), start=1)]
    return [r for r in found if role is None or r.role == role]


def calibration_rows(landscape: list[MeasuredRow], k: int) -> tuple[list[MeasuredRow],
                                                                    list[MeasuredRow]]:
    """The k rows a landscape's own calibration fits on (its first k in file order) and the
    rows it is then scored on (the rest)."""
    ordered = sorted(landscape, key=lambda r: (r.file, r.number))
    return ordered[:k], ordered[k:]


def main() -> None:
    counts = Counter((r.file, r.role) for r in rows())
    for (file, role), n in sorted(counts.items()):
        print(f"{file:45s} {role:10s} {n:4d}")
    print(f"{'all':45s} {'':10s} {sum(counts.values()):4d}")


if __name__ == "__main__":
    main()
