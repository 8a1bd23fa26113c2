"""What a layout's own overlap, bucket and offload values change in the step's terms: the
coefficients it is priced with, and the parameters its offload moves (performance.py)."""

from __future__ import annotations

from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.context_parallel import gradient_group
from orchestrator.costmodel.experts import expert_factors, expert_params_per_rank
from orchestrator.costmodel.memory import params_on_first_stage
from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.presets import ModelShape
from orchestrator.space import Layout


def layout_coefficients(c: Coefficients, layout: Layout, dtype: str) -> Coefficients:
    """The coefficients with the layout's overlap switch and bucket size applied."""
    if layout.bucket_size is not None:
        element = 4 if dtype == "fp32" else 2
        c = c.with_(bucket_bytes=layout.bucket_size * element,
                    gather_bucket_bytes=layout.bucket_size * element)
    if layout.overlap_comm is True:
        c = c.with_(overlap_grad_deepspeed=c.overlap_grad)
    elif layout.overlap_comm is False:
        c = c.with_(overlap_grad=0.0, overlap_grad_deepspeed=0.0)
    return c


def offloaded_params(model: ModelShape, layout: Layout, gpus_per_node: int,
                      runtime: ZeroEngine) -> tuple[float, float]:
    """(parameters of the rank's optimizer shard, of its weight shard), experts included."""
    params = params_on_first_stage(model, layout)
    group = gradient_group(layout, gpus_per_node, runtime)
    f = group.factors(gpus_per_node, runtime.engine_of(layout.zero_stage))
    shard, weights = params / f.sos, params / f.sp
    experts = expert_params_per_rank(model, layout)
    if experts:
        ef = expert_factors(layout, gpus_per_node, runtime.engine_of)
        shard, weights = shard + experts / ef.sos, weights + experts / ef.sp
    return shard, weights

