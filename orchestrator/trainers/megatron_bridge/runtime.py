"""How Megatron-Bridge runs ZeRO and overlap, for the cost model (costmodel/zero_engine.py):
Megatron-Core's engine, as Megatron-LM's, with Bridge's own defaults.

The difference from Megatron-LM is the default: recipes/common.py `_pretrain_common`
(megatron-bridge 0.6.2), which every pretraining recipe builds on, sets
`DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True, ...)`, so
the DDP reduction hides behind the backward unless the user's overrides say
`ddp.overlap_grad_reduce=false`. Expert dispatch overlaps only with
`model.overlap_moe_expert_parallel_comm=true` (megatron-core 0.19.2 ModelParallelConfig, False by
default), and is DeepEP's per-node dispatch with `model.moe_token_dispatcher_type=flex`
(TransformerConfig; "allgather" by default).
"""

from __future__ import annotations

from orchestrator.costmodel.zero_engine import MEGATRON_CORE_GRADIENTS, ZeroEngine


def _said(overrides, key: str) -> str | None:
    """The last value `overrides` give `key` (Hydra applies them in order), or None."""
    found = None
    for item in overrides:
        name, sep, text = item.partition("=")
        if sep and name.lstrip("+") == key:
            found = text.strip().lower()
    return found


def bridge_runtime(overrides=()) -> ZeroEngine:
    """Megatron-Bridge's runtime under the user's overrides (`trial.megatron_bridge.overrides`)."""
    return ZeroEngine(
        ddp_overlaps=_said(overrides, "ddp.overlap_grad_reduce") != "false",
        param_gather_overlaps=_said(overrides, "ddp.overlap_param_gather") != "false",
        overlaps_expert_comm=_said(overrides, "model.overlap_moe_expert_parallel_comm") == "true",
        dispatch_per_node=_said(overrides, "model.moe_token_dispatcher_type") == "flex",
        **MEGATRON_CORE_GRADIENTS)
