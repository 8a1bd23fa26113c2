"""What torchtitan 0.3.0's own config registry and parallelism hold that ParaTune must know:
which of its configs build a mixture of experts or use variable-length attention (read from
each module's config_registry.py; tests check them against the installed registry), and how a
layout's ZeRO stage or sharding factors become its data-parallel shard and replicate degrees.
"""

from __future__ import annotations

from orchestrator.common.errors import SpecError

# torchtitan 0.3.0's MoE configs, from each module's config_registry.py ("*": every config of
# the module); the modules listed in DENSE build dense models only. A module named in neither
# (an experiment, the user's own) is not judged.
TORCHTITAN_MOE_CONFIGS: dict[str, tuple[str, ...]] = {
    "deepseek_v3": ("*",),
    "gpt_oss": ("*",),
    "kimi_k2_7": ("*",),
    "qwen3": ("qwen3_30b_a3b", "qwen3_moe_debug", "qwen3_moe_deepep",
              "qwen3_debugmodel_moe_param_groups"),
    "qwen3_5": ("qwen35_debugmodel_moe", "qwen35_35b_a3b", "qwen35_122b_a10b",
                "qwen35_397b_a17b"),
}
TORCHTITAN_DENSE_MODULES = ("llama3", "muse_glimmer", "flux")
TORCHTITAN_MOE_EXAMPLES = "deepseek_v3 deepseek_v3_16b, qwen3 qwen3_30b_a3b, gpt_oss gpt_oss_20b"


def torchtitan_is_moe(module: str, config: str) -> bool | None:
    """Whether torchtitan's --module/--config builds a mixture of experts; None when unknown."""
    if module in TORCHTITAN_MOE_CONFIGS:
        listed = TORCHTITAN_MOE_CONFIGS[module]
        return "*" in listed or config in listed
    return False if module in TORCHTITAN_DENSE_MODULES else None


# torchtitan 0.3.0's configs whose model uses variable-length attention, read from each
# module's config_registry.py (tests check them against the installed registry).
TORCHTITAN_VARLEN_CONFIGS: dict[str, tuple[str, ...]] = {
    "gpt_oss": ("gpt_oss_debugmodel", "gpt_oss_20b", "gpt_oss_120b"),
    "llama3": ("llama3_debugmodel_varlen_attn",),
    "qwen3": ("qwen3_8b_first_85_pct_layers_nvfp4", "sft_qwen3_8b_math"),
    "qwen3_5": ("qwen35_debugmodel_varlen_attn",),
}
VARLEN_CP = ("torchtitan: \"spmd_types + CP is not supported with ScaledDotProductAttention or "
             "VarlenAttention. Use FlexAttention + CP or disable CP.\"")


def torchtitan_data_parallel(layout, gpus_per_node: int) -> tuple[int, int, str | None]:
    """(data_parallel_shard_degree, data_parallel_replicate_degree, fsdp_reshard_after_forward)
    of a layout on torchtitan; None for the reshard policy where nothing is sharded."""
    dp, f = layout.dp, layout.factors(gpus_per_node)
    if f.secondary == 1 and f.sp == f.sg == f.sos and dp % f.sp == 0:
        group = f.sp  # DDP (1), ZeRO-3 / FSDP (dp), HSDP / MiCS (g)
        return (1, dp, None) if group == 1 else (group, dp // group, "always")
    if f.sp == 1 and f.sg == f.sos == dp:
        return dp, 1, "never"  # ZeRO-2
    if f.sp == f.sg == 1 and f.sos == dp:
        return 1, dp, None  # ZeRO-1: torchtitan has no optimizer-only sharding
    raise SpecError(
        f"layout {layout.key()}: torchtitan cannot shard parameters, gradients and optimizer "
        f"states by {f.sp}, {f.sg} and {f.sos} (secondary {f.secondary}); it runs DDP, ZeRO-2 "
        "(FSDP without resharding), FSDP and HSDP: use space.zero_stage, not AMSP factors")
