"""The values of the layout's categorical knobs, and the names of AMSP's sharding factors."""

from __future__ import annotations

CHECKPOINT_MODES = ("none", "selective", "full")
# Megatron-Core's context-parallel communication: a ring of K/V blocks (p2p), all-to-all over
# heads (a2a, DeepSpeed-Ulysses), or all-gathered K/V (allgather).
CP_COMM_TYPES = ("p2p", "a2a", "allgather")
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved")
PIPELINE_SPLITS = ("even", "embedding_loss", "first_last")  # orchestrator/pipeline_split.py
# GEMM precision: bf16 mixed precision (float32 on CPU clusters), or an FP8 recipe named by its
# scaling: per tensor ("tensorwise"), per row ("rowwise"), per tensor from an amax history
# ("delayed"), per 128-wide block ("blockwise", DeepSeek-V3's) or MXFP8's 32-element blocks.
PRECISIONS = ("bf16", "fp8-tensorwise", "fp8-rowwise", "fp8-delayed", "fp8-blockwise", "mxfp8")
# Model states in host memory: the optimizer states (stepped there), or those and the weights.
OFFLOADS = ("none", "optimizer", "optimizer+params")
# AMSP's six sharding factors and ZeRO++'s secondary shard, flattened as the job's flags.
SHARDING_FACTORS = ("s0p", "s1p", "s0g", "s1g", "s0os", "s1os")
