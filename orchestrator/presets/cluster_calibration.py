"""The cost model's multipliers fitted to a cluster's own measurements (`paratune calibrate
--from`), held in its preset file, so a spec that names the file prices with them.

The fields are those calibration refits (costmodel/calibration.py): how much longer than the
analytic model compute, the pipeline bubble and model-parallel communication (bandwidth and
latency apart) took, the measured exposed share of data-parallel communication, and a fixed
cost per layer and micro-batch. `fitted_on` says which measurements they came from.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClusterCalibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    scale_compute: float = Field(default=1.0, gt=0, le=1e6)
    scale_bubble: float = Field(default=1.0, ge=0, le=1e6)
    scale_model_parallel_comm: float = Field(default=1.0, ge=0, le=1e6)
    scale_model_parallel_latency: float = Field(default=1.0, ge=0, le=1e9)
    scale_data_parallel_comm: float = Field(default=1.0, ge=0, le=1e6)
    # None: the overlap model of data-parallel communication (coefficients.py), as stock.
    dp_exposure: float | None = Field(default=None, ge=0, le=1e6)
    dp_exposure_gathers: float | None = Field(default=None, ge=0, le=1e6)
    launch_overhead_s: float = Field(default=20e-6, ge=0, le=1e3)
    fitted_on: str = Field(default="", max_length=2000)
