"""The figures that judge the cost model on measured layouts, defined once for
docs/validation.md (benchmarks/validate_costmodel.py) and `paratune calibrate --from`, per
landscape (one model on one cluster) and over all rows.

- The error of a row: predicted / measured step time - 1; the median and the 90th percentile
  (`p90`) of its absolute value.
- Layouts that ran although the memory model says they do not fit.
- Spearman's correlation of predicted with measured throughput per GPU over a landscape's
  distinct layouts (a layout measured more than once: the median of its runs), given
  SPEARMAN_LAYOUTS of them; and the pairs of layouts the model orders as measured.
- The measured regret of the model's pick: the landscape's measured best over the measured
  throughput of the layout it predicts fastest among those it would not prune (`pruned`:
  beyond the memory margin; all of them if it prunes every one), minus 1.
Over all rows: the errors pooled row by row, the median of the landscapes' Spearman and regret.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from orchestrator.costmodel.calibration import spearman
from orchestrator.costmodel.cluster_fit import Measurement
from orchestrator.costmodel.estimate import Estimate

SPEARMAN_LAYOUTS = 5  # a landscape is ranked when it has this many distinct layouts


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


@dataclass(frozen=True)
class Ranking:
    """How a landscape's distinct layouts are ordered (module docstring)."""

    layouts: int
    spearman: float | None
    regret: float | None
    pairs: int
    pairs_right: int
    pick_pruned_best: bool | None  # a pruned layout measured faster than the pick; None: no pick


def step_error(row: Measurement, estimate: Estimate) -> float:
    """predicted / measured step time - 1."""
    return estimate.step_time_s / row.step_time_s - 1


def step_errors(rows: list[Measurement], predicted: list[Estimate]) -> list[float]:
    return [step_error(row, e) for row, e in zip(rows, predicted)]


def p90(values: list[float]) -> float | None:
    """The 90th percentile: the value at index int(0.9 n) of the sorted values (the largest for
    fewer than 10); None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def abs_error_figures(errors: list[float]) -> dict:
    """Median and 90th percentile of the errors' absolute values (None for no error)."""
    misses = [abs(e) for e in errors]
    return {"median_abs_error": statistics.median(misses) if misses else None,
            "p90_abs_error": p90(misses)}


def pruned(estimate: Estimate) -> bool:
    """Whether a campaign would skip the layout unmeasured: beyond the memory margin, or one
    the cluster cannot run (a risky layout, over capacity within the margin, is measured)."""
    return estimate.prunable


def ranking(rows: list[Measurement], predicted: list[Estimate]) -> Ranking:
    """The ranking figures of one landscape's rows, each with its estimate."""
    runs = defaultdict(list)
    for row, estimate in zip(rows, predicted):
        runs[row.config.key()].append((row, estimate))
    layouts = []  # (predicted, measured throughput per GPU, pruned) per distinct layout
    for measured in runs.values():
        row, estimate = measured[0]
        layouts.append((row.tokens_per_gpu_step / estimate.step_time_s,
                        statistics.median(r.tokens_per_gpu_step / r.step_time_s
                                          for r, _ in measured), pruned(estimate)))
    pairs = [(a, b) for i, a in enumerate(layouts) for b in layouts[i + 1:] if a[1] != b[1]]
    regret = pick_pruned_best = None
    if len(layouts) > 1:
        kept = [layout for layout in layouts if not layout[2]] or layouts
        pick = max(kept, key=lambda layout: layout[0])
        regret = max(m for _, m, _ in layouts) / pick[1] - 1
        pick_pruned_best = any(cut and m > pick[1] for _, m, cut in layouts)
    return Ranking(len(layouts), _rank_correlation(layouts), regret, len(pairs),
                   sum((a[0] - b[0]) * (a[1] - b[1]) > 0 for a, b in pairs), pick_pruned_best)


def landscape_figures(rows: list[Measurement], predicted: list[Estimate]) -> Figures:
    """The figures of one landscape's rows, each with its estimate."""
    ranked = ranking(rows, predicted)
    return Figures(**_errors(rows, predicted), layouts=ranked.layouts, spearman=ranked.spearman,
                   regret=ranked.regret, pairs=ranked.pairs, pairs_right=ranked.pairs_right)


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


def _errors(rows: list[Measurement], predicted: list[Estimate]) -> dict:
    return {"rows": len(rows), "does_not_fit": sum(not e.fits for e in predicted),
            **abs_error_figures(step_errors(rows, predicted))}


def _rank_correlation(layouts: list[tuple[float, float, bool]]) -> float | None:
    """Spearman's over the distinct layouts, or None: too few, or one side all equal."""
    if len(layouts) < SPEARMAN_LAYOUTS:
        return None
    value = spearman([p for p, _, _ in layouts], [m for _, m, _ in layouts])
    return value if value == value else None
