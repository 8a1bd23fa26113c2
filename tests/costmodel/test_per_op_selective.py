"""torchtitan's "selective" activation checkpointing is per-op (its SelectiveAC policy): a block
keeps its input, its attention's output and the outputs of its 1st, 3rd, ... matmuls, and its
backward replays the 2nd, 4th, ... matmuls. The cost model prices that for the torchtitan
trainer and for published torchtitan rows, and Megatron-Core's core-attention replay for the
Megatron trainers. The expected figures are counted by hand from Llama 3.1 8B's shape."""

from __future__ import annotations

import pytest

from orchestrator.costmodel.activations import (
    activation_bytes,
    activation_bytes_per_layer,
    per_op_layer_bytes,
)
from orchestrator.presets import MODEL_PRESETS
from orchestrator.result import (
    PER_OP_SELECTIVE,
    PER_OP_SELECTIVE_FUSED_QKV,
    model_flops_per_iteration,
)
from orchestrator.trainers import registry
from tests.builders import layout

LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"].model_copy(update={"seq_len": 8192})
H, Q, KV, FFN = 4096, 4096, 1024, 14336  # hidden, 32 heads x 128, 8 kv heads x 128, MLP
TOKENS = 2 * 8192  # micro-batch 2 of 8,192
FSDP = dict(ranks=8, batch=16, tp=1, pp=1, cp=1, zero_stage=3, micro_batch_size=2,
            activation_checkpointing="selective")


def test_the_shape_is_the_one_counted_by_hand():
    assert (LLAMA_8B.hidden, LLAMA_8B.num_heads * LLAMA_8B.head_dim,
            LLAMA_8B.kv_heads * LLAMA_8B.head_dim, LLAMA_8B.ffn_hidden) == (H, Q, KV, FFN)
    assert LLAMA_8B.gated_mlp


def test_a_block_keeps_its_input_attention_output_and_odd_matmuls():
    # Matmuls in order: wq (Q), wk (KV), wv (KV), wo (H), w1 (FFN), w3 (FFN), w2 (H).
    # Kept: the input (H), the attention's output (Q), wq, wv, w1 and w2: bf16, 2 bytes.
    kept_per_token = H + Q + Q + KV + FFN + H
    expected = kept_per_token * 2 * TOKENS
    assert per_op_layer_bytes(LLAMA_8B, layout(**FSDP), 2) == expected
    # Megatron's selective keeps Korthikanti's 34sbh (no scores) at tp 1: more than twice.
    megatron = activation_bytes_per_layer(LLAMA_8B, 2, 1, "selective", "bf16-mixed")
    assert megatron == 34 * TOKENS * H
    assert expected < megatron / 2


def test_a_fused_qkv_block_keeps_the_whole_projection():
    # torchtitan 0.3's Llama 3 fuses wq, wk and wv (fuse_qkv=True): matmuls wqkv (Q + 2 KV),
    # wo, w1, w3, w2; kept: the input, the attention's output, wqkv, w1 and w2.
    kept_per_token = H + Q + (Q + 2 * KV) + FFN + H
    assert per_op_layer_bytes(LLAMA_8B, layout(**FSDP), 2, fused_qkv=True) == \
        kept_per_token * 2 * TOKENS
    none = model_flops_per_iteration(LLAMA_8B, TOKENS, "none")
    fused = model_flops_per_iteration(LLAMA_8B, TOKENS, PER_OP_SELECTIVE_FUSED_QKV)
    assert fused - none == pytest.approx(32 * 2 * (Q * H + H * FFN) * TOKENS, rel=1e-12)


def test_the_stage_holds_every_block_and_one_replayed_block():
    per_op = activation_bytes(LLAMA_8B, layout(**FSDP), "bf16-mixed", True,
                              selective=PER_OP_SELECTIVE)
    kept = per_op_layer_bytes(LLAMA_8B, layout(**FSDP), 2)
    everything = activation_bytes_per_layer(LLAMA_8B, 2, 1, "none", "bf16-mixed")
    assert per_op == pytest.approx(32 * kept + (everything - kept), rel=1e-12)


def test_tensor_parallel_row_outputs_are_partial_sums_kept_whole():
    # tp 8 with sequence parallelism: column outputs and the input split 8 ways; w2's output
    # (saved) is a full-width partial sum, and wo's and w2's reduce-scatters keep H/8 each.
    tp8 = layout(**{**FSDP, "ranks": 64, "tp": 8, "sequence_parallel": True})
    kept_per_token = H / 8 + Q / 8 + Q / 8 + KV / 8 + FFN / 8 + H + 2 * H / 8
    assert per_op_layer_bytes(LLAMA_8B, tp8, 2) == pytest.approx(kept_per_token * 2 * TOKENS)


def test_its_backward_replays_wk_wo_and_w3():
    none = model_flops_per_iteration(LLAMA_8B, TOKENS, "none")
    per_op = model_flops_per_iteration(LLAMA_8B, TOKENS, PER_OP_SELECTIVE)
    replayed = 2 * (H * KV + Q * H + H * FFN)  # one forward of each, per token and layer
    assert per_op - none == pytest.approx(32 * replayed * TOKENS, rel=1e-12)


def test_the_torchtitan_trainer_prices_selective_per_op_and_megatron_does_not():
    from orchestrator.costmodel import CostModel
    from orchestrator.presets import CLUSTER_PRESETS

    selective = layout(**FSDP)

    def cost(trainer: str) -> CostModel:
        return CostModel(LLAMA_8B, CLUSTER_PRESETS["h100-80g"], 8,
                         runtime=registry.adapter(trainer).runtime)

    titan, megatron = cost("torchtitan"), cost("megatron-lm")
    assert titan.runtime.recompute_of(selective) == PER_OP_SELECTIVE_FUSED_QKV
    assert megatron.runtime.recompute_of(selective) == "selective"
    assert titan.memory(selective).activations == pytest.approx(activation_bytes(
        LLAMA_8B, selective, "bf16-mixed", True, selective=PER_OP_SELECTIVE_FUSED_QKV),
        rel=1e-12)
    assert titan.memory(selective).activations < megatron.memory(selective).activations / 2
    titan_flops = titan.estimate(selective).hardware_flops_per_step
    assert titan_flops == pytest.approx(model_flops_per_iteration(
        LLAMA_8B, 16 * 8192, PER_OP_SELECTIVE_FUSED_QKV), rel=1e-12)


def test_published_torchtitan_rows_of_2024_2025_project_qkv_apart():
    from orchestrator.costmodel.published_names import framework_of

    framework = framework_of({"framework": "torchtitan 820504e (June 2025)"}, "")
    assert framework.runtime.selective_recompute == PER_OP_SELECTIVE
