"""Multi-fidelity search by successive halving: screen every proposal with a few steps, then
re-measure the best share of the screened ones with the full number of steps.

Screening and full trials are separate trials (their own ids, `fidelity` in the journal and in
MLflow); the campaign's best is taken among full-fidelity trials once there is one.
"""

from __future__ import annotations

import math

from orchestrator.journal import TrialRecord
from orchestrator.search_spaces import ParallelConfig

SCREEN, FULL = "screen", "full"


def promotions(records: list[TrialRecord], fidelity, metric: str, mode: str) -> list[ParallelConfig]:
    """Screened configs now in the top `keep_fraction` that have no full trial yet, best first."""
    screened = [r for r in records if r.fidelity == SCREEN and r.result is not None
                and r.result.ok and r.result.metric(metric) is not None]
    if len(screened) < fidelity.min_screened:
        return []
    screened.sort(key=lambda r: r.result.metric(metric), reverse=mode == "max")
    keep = math.ceil(fidelity.keep_fraction * len(screened))
    full = {r.config for r in records if r.fidelity == FULL}
    return [r.config for r in screened[:keep] if r.config not in full]


def comparable(records: list[TrialRecord]) -> list[TrialRecord]:
    """The records the best is chosen from: full-fidelity ones when any exist, else screens
    (never the runs of a scaling study, which measure other scales)."""
    full = [r for r in records if r.fidelity == FULL and r.result is not None and r.result.ok]
    return full if full else [r for r in records if r.fidelity == SCREEN]
