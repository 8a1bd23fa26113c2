"""The campaign's cost model as trials end: refitted on the measured trials, it prunes
proposals its memory model puts beyond its margin (fit_verdict.py's `does_not_fit`) and stamps
each result with what it predicted.

A `risky` layout (predicted above capacity, within MEMORY_MARGIN) is measured: an OOM is a
recorded result, a prune loses the layout. The band applies to the calibrated figure too: the
calibration's memory ratio is one mean over the layouts measured so far, which the model said
fit, while the layouts nearest the limit (largest micro-batch, least sharding) are where it was
not checked; the margin covers a layout's own departure from the model, which one mean ratio
does not remove.

The stock model (`base`) stays the one trial requests are measured against, so a trial's MFU
does not move with the calibration.
"""

from __future__ import annotations

from orchestrator.costmodel import GB, Calibration, CostModel, calibrate
from orchestrator.costmodel.fit_verdict import RISKY
from orchestrator.record.campaign import calibration_input
from orchestrator.record.journal import TrialRecord
from orchestrator.result import TrialResult
from orchestrator.space import Layout

# Refitting is cheap: on every success while few are measured, then on every 10th.
EVERY_SUCCESS_UNTIL = 30
THEN_EVERY = 10


class LiveCostModel:
    def __init__(self, base: CostModel, records: list[TrialRecord]):
        self.base = base
        self.current = base  # replaced by the calibrated model as trials end
        self.calibration: Calibration | None = None
        self.recalibrate(records)

    def recalibrate(self, records: list[TrialRecord]) -> None:
        """Refit the model on the measured trials."""
        measured = calibration_input(records)
        successes = sum(1 for _, _, result in measured if result.ok)
        if successes < EVERY_SUCCESS_UNTIL or successes % THEN_EVERY == 0:
            self.calibration = calibrate(self.base, measured) or self.calibration
            if self.calibration is not None:
                self.current = self.calibration.model

    def infeasible(self, layout: Layout) -> TrialResult | None:
        """The `infeasible` result of a layout the cluster cannot run (an FP8 recipe without FP8
        cores) or the memory model (scaled by calibration) puts beyond its margin, or None if it
        may run (it fits, or is risky)."""
        prediction = self.current.estimate(layout)
        if prediction.unsupported:
            return TrialResult(status="infeasible", world_size=layout.world_size,
                               error=prediction.unsupported)
        scale = self._memory_scale()
        if not prediction.prunable_scaled(scale):
            return None
        memory = prediction.memory
        if memory.host_capacity and memory.host > memory.host_capacity:
            return TrialResult(status="infeasible", world_size=layout.world_size,
                               error=f"predicted {memory.host / GB:.2f} GB of offloaded states "
                                     f"per rank > {memory.host_capacity / GB:.2f} GB, its share of "
                                     "the node's host memory")
        predicted_gb = ((memory.total - memory.reserve) * scale + memory.reserve) / GB
        return TrialResult(
            status="infeasible", world_size=layout.world_size,
            error=_overflow_message(predicted_gb, prediction.memory_gb, prediction.capacity_gb,
                                    prediction.memory_margin),
            extra={"predicted_memory_gb": predicted_gb},
        )

    def _memory_scale(self) -> float:
        return self.calibration.memory_scale if self.calibration else 1.0

    def annotate(self, layout: Layout, result: TrialResult) -> None:
        """Record beside a measured result what the model predicted for it (and, for a risky
        layout, that it was measured inside the margin)."""
        predicted = self.current.estimate(layout)
        result.extra.setdefault("predicted_tokens_per_s", predicted.tokens_per_s)
        result.extra.setdefault("predicted_memory_gb", predicted.memory_gb_used)
        if predicted.memory_verdict_scaled(self._memory_scale()) == RISKY:
            result.extra.setdefault("memory_verdict", RISKY)


def _overflow_message(predicted_gb: float, raw_gb: float, capacity_gb: float,
                      margin: float) -> str:
    """Why a layout was pruned, in the calibrated figure the decision used (and the model's
    own figure beside it when calibration moved it), against capacity and the margin."""
    raw = ""
    if f"{raw_gb:.2f}" != f"{predicted_gb:.2f}":
        raw = f" ({raw_gb:.2f} GB before calibration)"
    if not margin:
        return f"predicted {predicted_gb:.2f} GB per device{raw} > {capacity_gb:.2f} GB capacity"
    return (f"predicted {predicted_gb:.2f} GB per device{raw} > "
            f"{capacity_gb * (1 + margin):.2f} GB: {capacity_gb:.2f} GB capacity plus the "
            f"memory model's {margin:.0%} margin")
