"""Spec keys that ask for a feature ParaTune does not model yet, each with the feature's name,
and other tools' names for keys ParaTune has.

Such a key is refused as any key the spec does not know, but "unknown key" reads like a typo;
the user asked for something real, so the error names the feature. This table is the one
place that lists them: a feature that lands takes its keys out.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

# A glob over the key path as a user writes it; a `space.configs[N]` entry's key reads as the
# same key of `space`.
NOT_SUPPORTED_YET: dict[str, str] = {
    "*fp4*": "FP4 training (NVFP4, MXFP4)",
    "space.tp_comm_overlap": "overlapping tensor-parallel communication with its GEMMs",
    # space.pipeline_split covers an even split, the embedding and the loss as a layer each,
    # and first and last stages sized to the middle ones (first_last).
    "*pipeline_model_parallel_layout": "pipeline stages of any layer count (a layout string)",
}

_FIRST_LAST = "pipeline_split: first_last sizes the first and last stages"

# Other tools' names for a key ParaTune has (Megatron-LM's flags, Hugging Face configs), so
# the error names ours rather than listing every key.
OTHER_NAMES: dict[str, str] = {
    "model.moe_router_topk": "experts_per_token",
    "model.n_group": "moe_router_num_groups",
    "model.topk_group": "moe_router_group_topk",
    "model.top_k": "experts_per_token",
    "model.num_experts_per_tok": "experts_per_token",
    "model.n_routed_experts": "num_experts",
    "model.num_local_experts": "num_experts",
    "model.moe_intermediate_size": "moe_ffn_hidden",
    "model.moe_shared_expert_intermediate_size": "shared_expert_ffn_hidden",
    "model.first_k_dense_replace": "first_dense_layers",
    "model.head_dim": "kv_channels",
    "space.context_parallel*": "cp",
    "space.cp_comm": "cp_comm_type",
    "space.expert_parallel*": "ep",
    "space.expert_model_parallel*": "ep",
    "space.expert_tensor_parallel*": "etp",
    "*.fp8*": "precision",
    "trial.precision": "precision, a space knob",
    "space.offload_optimizer*": "offload",
    "space.offload_param*": "offload",
    "space.*cpu_offload": "offload",
    "space.reduce_bucket_size": "bucket_size",
    "space.allgather_bucket_size": "bucket_size",
    "space.ddp_bucket_size": "bucket_size",
    "space.bucket_cap_mb": "bucket_size",
    "space.overlap_grad_reduce": "overlap_comm",
    "space.overlap_param_gather": "overlap_comm",
    "space.*first_pipeline_num_layers": _FIRST_LAST,
    "space.*last_pipeline_num_layers": _FIRST_LAST,
    "space.num_layers_in_*_pipeline_stage": _FIRST_LAST,
}

_INDEX = re.compile(r"\[\d+\]$")


def _key(path: list[str]) -> str:
    parts = [_INDEX.sub("", part) for part in path]
    if parts[:2] == ["space", "configs"]:
        parts = ["space", *parts[2:]]
    return ".".join(parts).lower()


def unsupported_feature(path: list[str]) -> str | None:
    """The feature a key path asks for that ParaTune does not have yet, or None."""
    key = _key(path)
    return next((feature for pattern, feature in NOT_SUPPORTED_YET.items()
                 if fnmatchcase(key, pattern)), None)


def our_name(path: list[str]) -> str | None:
    """ParaTune's name for a key another tool spells differently, or None."""
    key = _key(path)
    return next((ours for pattern, ours in OTHER_NAMES.items() if fnmatchcase(key, pattern)),
                None)
