"""The campaign's cost model as trials end: refitted on the measured trials, it prunes
proposals its memory model says cannot fit and stamps each result with what it predicted.

The stock model (`base`) stays the one trial requests are measured against, so a trial's MFU
does not move with the calibration.
"""

from __future__ import annotations

from orchestrator.costmodel import GB, Calibration, CostModel, calibrate
from orchestrator.record.campaign import calibration_input
from orchestrator.record.journal import TrialRecord
from orchestrator.result import TrialResult
from orchestrator.space import ParallelConfig

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

    def infeasible(self, config: ParallelConfig) -> TrialResult | None:
        """The `infeasible` result of a layout the cluster cannot run (an FP8 recipe without FP8
        cores) or the memory model (scaled by calibration) says cannot fit, or None if it may."""
        prediction = self.current.estimate(config)
        if prediction.unsupported:
            return TrialResult(status="infeasible", world_size=config.world_size,
                               error=prediction.unsupported)
        scale = self.calibration.memory_scale if self.calibration else 1.0
        if prediction.fits_scaled(scale):
            return None
        memory = prediction.memory
        if memory.host_capacity and memory.host > memory.host_capacity:
            return TrialResult(status="infeasible", world_size=config.world_size,
                               error=f"predicted {memory.host / GB:.2f} GB of offloaded states "
                                     f"per rank > {memory.host_capacity / GB:.2f} GB, its share of "
                                     "the node's host memory")
        predicted_gb = ((memory.total - memory.reserve) * scale + memory.reserve) / GB
        return TrialResult(
            status="infeasible", world_size=config.world_size,
            error=_overflow_message(predicted_gb, prediction.memory_gb, prediction.capacity_gb),
            extra={"predicted_memory_gb": predicted_gb},
        )

    def annotate(self, config: ParallelConfig, result: TrialResult) -> None:
        """Record beside a measured result what the model predicted for it."""
        predicted = self.current.estimate(config)
        result.extra.setdefault("predicted_tokens_per_s", predicted.tokens_per_s)
        result.extra.setdefault("predicted_memory_gb", predicted.memory_gb_used)


def _overflow_message(predicted_gb: float, raw_gb: float, capacity_gb: float) -> str:
    """Why a layout was pruned, in the calibrated figure the decision used (and the model's
    own figure beside it when calibration moved it)."""
    raw = ""
    if f"{raw_gb:.2f}" != f"{predicted_gb:.2f}":
        raw = f" ({raw_gb:.2f} GB before calibration)"
    return f"predicted {predicted_gb:.2f} GB per device{raw} > {capacity_gb:.2f} GB capacity"
