"""The figures that judge the cost model on measured layouts, as docs/validation.md gives them
(benchmarks/validate_costmodel.py), per landscape (one model on one cluster) and over all rows.

- The error of a row: predicted / measured step time - 1; the median and the 90th percentile
  (nearest rank) of its absolute value.
- Layouts that ran although the memory model says they do not fit.
- Spearman's correlation of predicted with measured throughput per GPU over a landscape's
  distinct layouts (a layout measured more than once: the median of its runs), given
  SPEARMAN_LAYOUTS of them; and the pairs of layouts the model orders as measured.
- The measured regret of the model's pick: the landscape's measured best over the measured
  throughput of the layout it predicts fastest among those it would not prune, minus 1.
Over all rows: the errors pooled row by row, the median of the landscapes' Spearman and regret.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from orchestrator.costmodel.calibration import spearman
from orchestrator.costmodel.cluster_fit import Measurement
from orchestrator.costmodel.estimate import Estimate

SPEARMAN_LAYOUTS = 5


@dataclass(frozen=True)
class Figures:
    rows: int
    does_not_fit: int  # rows that ran although the model says they do not fit
    median_abs_error: float
    p90_abs_error: float
    layouts: int | None = None  # distinct layouts (None over several landscapes)
    spearman: float | None = None  # None: too few layouts to rank
    regret: float | None = None  # None: one layout, nothing to pick between
    pairs: int = 0  # pairs of layouts measured at different speeds
    pairs_right: int = 0  # those the model orders as measured

    def to_dict(self) -> dict:
        return asdict(self)


def step_errors(rows: list[Measurement], predicted: list[Estimate]) -> list[float]:
    """Each row's predicted / measured step time - 1."""
    return [e.step_time_s / row.step_time_s - 1 for row, e in zip(rows, predicted)]


def landscape_figures(rows: list[Measurement], predicted: list[Estimate]) -> Figures:
    """The figures of one landscape's rows, each with its estimate."""
    runs = defaultdict(list)
    for row, estimate in zip(rows, predicted):
        runs[row.config.key()].append((row, estimate))
    layouts = []  # (predicted, measured throughput per GPU, pruned) per distinct layout
    for measured in runs.values():
        row, estimate = measured[0]
        layouts.append((row.tokens_per_gpu_step / estimate.step_time_s,
                        statistics.median(r.tokens_per_gpu_step / r.step_time_s
                                          for r, _ in measured), _pruned(estimate)))
    pairs = [(a, b) for i, a in enumerate(layouts) for b in layouts[i + 1:] if a[1] != b[1]]
    kept = [layout for layout in layouts if not layout[2]] or layouts
    pick = max(kept, key=lambda layout: layout[0])
    return Figures(
        **_errors(rows, predicted), layouts=len(layouts),
        spearman=_rank_correlation(layouts),
        regret=max(m for _, m, _ in layouts) / pick[1] - 1 if len(layouts) > 1 else None,
        pairs=len(pairs), pairs_right=sum((a[0] - b[0]) * (a[1] - b[1]) > 0 for a, b in pairs))


def figures_by_landscape(rows: list[Measurement], predicted: list[Estimate]
                         ) -> dict[str, Figures]:
    """Each landscape's figures, and "all rows"'s (module docstring)."""
    groups = defaultdict(lambda: ([], []))
    for row, estimate in zip(rows, predicted):
        groups[row.landscape][0].append(row)
        groups[row.landscape][1].append(estimate)
    by_landscape = {name: landscape_figures(*pair) for name, pair in groups.items()}
    parts = by_landscape.values()
    ranked = [f.spearman for f in parts if f.spearman is not None]
    picked = [f.regret for f in parts if f.regret is not None]
    by_landscape["all rows"] = Figures(
        **_errors(rows, predicted),
        spearman=statistics.median(ranked) if ranked else None,
        regret=statistics.median(picked) if picked else None,
        pairs=sum(f.pairs for f in parts), pairs_right=sum(f.pairs_right for f in parts))
    return by_landscape


def _pruned(estimate: Estimate) -> bool:
    """Whether a campaign would skip the layout unmeasured."""
    return not estimate.fits


def _errors(rows: list[Measurement], predicted: list[Estimate]) -> dict:
    misses = sorted(abs(e) for e in step_errors(rows, predicted))
    return {"rows": len(rows), "does_not_fit": sum(not e.fits for e in predicted),
            "median_abs_error": statistics.median(misses),
            "p90_abs_error": misses[min(len(misses) - 1, int(0.9 * len(misses)))]}


def _rank_correlation(layouts: list[tuple[float, float, bool]]) -> float | None:
    """Spearman's over the distinct layouts, or None: too few, or one side all equal."""
    if len(layouts) < SPEARMAN_LAYOUTS:
        return None
    value = spearman([p for p, _, _ in layouts], [m for _, m, _ in layouts])
    return value if value == value else None
