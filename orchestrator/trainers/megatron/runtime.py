"""How Megatron-LM runs ZeRO, DDP and expert dispatch, for the cost model
(costmodel/zero_engine.py): Megatron-Core's DDP reduces float32 gradients bucket by bucket,
behind the backward only with `--overlap-grad-reduce` (off by default); its distributed
optimizer is ZeRO-1. Its base arguments say which overlaps are on.

Megatron-DeepSpeed runs DeepSpeed's engine (its DDP is DeepSpeed's, without ZeRO).
"""

from __future__ import annotations

from orchestrator.costmodel.zero_engine import MEGATRON_CORE_GRADIENTS, ZeroEngine

MEGATRON_OVERLAP_FLAG = "--overlap-grad-reduce"
MEGATRON_PARAM_GATHER_FLAG = "--overlap-param-gather"
MEGATRON_EP_OVERLAP_FLAG = "--overlap-moe-expert-parallel-comm"
MEGATRON_DISPATCHER_FLAG = "--moe-token-dispatcher-type"

MEGATRON_DEEPSPEED_RUNTIME = ZeroEngine(ddp_engine="deepspeed")


def megatron_lm_runtime(args: list[str] | tuple[str, ...] = ()) -> ZeroEngine:
    """Megatron-LM's runtime under its base arguments `args`: whether it overlaps its DDP
    reduction and its expert dispatch, and whether its dispatcher is the flex one (DeepEP)."""
    joined = " ".join(args).replace("=", " ").split()
    flex = any(a == MEGATRON_DISPATCHER_FLAG and b == "flex" for a, b in zip(joined, joined[1:]))
    return ZeroEngine(ddp_overlaps=MEGATRON_OVERLAP_FLAG in args,
                      param_gather_overlaps=MEGATRON_PARAM_GATHER_FLAG in args,
                      overlaps_expert_comm=MEGATRON_EP_OVERLAP_FLAG in args,
                      dispatch_per_node=flex, **MEGATRON_CORE_GRADIENTS)
