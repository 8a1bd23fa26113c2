"""The analytic cost model: pure functions that predict memory and speed of a layout.

It prunes configurations that cannot fit, even within its memory margin, before any trial
runs, and ranks the rest.
"""

from orchestrator.costmodel.calibration import Calibration, calibrate
from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.estimate import (
    CostModel,
    Estimate,
    estimate,
    dtype_for,
)
from orchestrator.costmodel.memory import GB, model_state_bytes, model_state_bytes_sharded

__all__ = [
    "GB", "Calibration", "Coefficients", "calibrate", "CostModel", "Estimate", "estimate",
    "model_state_bytes", "model_state_bytes_sharded", "dtype_for",
]
