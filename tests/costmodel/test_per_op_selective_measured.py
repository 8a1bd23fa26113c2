"""The per-op selective formula (`per_op_layer_bytes`) against what torchtitan 0.3.0's own
SelectiveAC keeps, measured on its own Llama 3 model on the CPU.

Method: torch.profiler with profile_memory=True records every CPU allocation and free; the sum
of each event's self memory over one forward is the bytes still live after it (the output
held, backward not run), which is what the autograd graph and the checkpoint's cache keep.
The model is built before profiling, so parameters are not counted. Models of 1 and 3 blocks
differ only by 2 blocks: half their difference is one block's bytes, with the embedding, the
final norm and the logits cancelled out.

CPU attention: there F.scaled_dot_product_attention runs
`_scaled_dot_product_flash_attention_for_cpu`, which is not in torchtitan's save list (its
GPU twin `_scaled_dot_product_flash_attention` is), so the stock policy replays attention on
the CPU and keeps no attention output. The measurement therefore uses SelectiveAC's own
override point, `get_save_ops`, adding the CPU op, so the CPU keeps what a GPU keeps; a test
shows that this op's outputs (the output and its log-sum-exp) are the whole difference.
ParaTune's torchtitan trials use flex or varlen attention, whose ops are in the list; the
model here uses torchtitan's SDPA module instead, as flex attention is compiled.

Float32 (4 bytes an element); a GPU run keeps the same elements in bf16.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan")

from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: E402
from torchtitan.models.common import (  # noqa: E402
    ComplexRoPE,
    Embedding,
    Linear,
    RMSNorm,
    compute_ffn_hidden_dim,
)
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers  # noqa: E402

from orchestrator.costmodel.activations import (  # noqa: E402
    activation_bytes_per_layer,
    per_op_layer_bytes,
)
from orchestrator.presets import ModelShape  # noqa: E402
from tests.builders import layout  # noqa: E402

DIM, HEADS, KV_HEADS, SEQ, BATCH, VOCAB = 256, 8, 2, 256, 2, 2048
FFN = compute_ffn_hidden_dim(DIM, multiple_of=256)  # Llama 3's rule: 768
FP32 = 4
SHAPE = ModelShape(num_layers=1, hidden=DIM, num_heads=HEADS, num_kv_heads=KV_HEADS,
                   ffn_hidden=FFN, vocab_size=VOCAB, seq_len=SEQ)
LAYOUT = layout(ranks=1, batch=BATCH, tp=1, micro_batch_size=BATCH,
                activation_checkpointing="selective")
TOKENS = SEQ * BATCH

TOLERANCE = 0.02
"""What the formula leaves out, per block: the attention's log-sum-exp (one float a head a
token, 8 of the 1,856 elements a token kept here: 0.4%) and the CPU RNG state the checkpoint
stashes (5 KB, 0.1%). 2% covers them and stays below the smallest tensor the formula could
wrongly keep or drop, the key or value projection's output (64 elements a token: 3.4%)."""


class SelectiveACWithCpuAttention(SelectiveAC):
    """torchtitan's SelectiveAC, saving the CPU flash attention as it saves the GPU one."""

    def get_save_ops(self) -> set:
        cpu_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
        return super().get_save_ops() | {cpu_flash}


POLICIES = {
    "none": None,
    "selective": SelectiveACWithCpuAttention,
    "selective-stock": SelectiveAC,
    "full": FullAC,
}


def _titan_llama3_on_sdpa(n_layers: int, fuse_qkv: bool) -> torch.nn.Module:
    """torchtitan's Llama 3, built by its own layer builder, with SDPA attention."""
    layers = _build_llama3_layers(
        n_layers=n_layers, dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, hidden_dim=FFN,
        fuse_qkv=fuse_qkv, attn_backend="flex",
        rope=ComplexRoPE.Config(dim=DIM // HEADS, max_seq_len=SEQ, theta=500000,
                                scaling="llama"))
    for block in layers:
        block.attention.inner_attention = ScaledDotProductAttention.Config()
    return Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB, layers=layers,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM),
        norm=RMSNorm.Config(normalized_shape=DIM),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB),
    ).build()


def _retained_after_forward(n_layers: int, policy: str, fuse_qkv: bool) -> int:
    torch.manual_seed(0)
    model = _titan_llama3_on_sdpa(n_layers, fuse_qkv)
    if POLICIES[policy] is not None:
        POLICIES[policy](POLICIES[policy].Config()).apply(model)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        output = model(tokens)
    assert output.requires_grad
    return sum(event.self_cpu_memory_usage for event in prof.events())


@lru_cache(maxsize=None)
def block_bytes(policy: str, fuse_qkv: bool = False) -> float:
    """Bytes one transformer block keeps after the forward: 3 blocks less 1, halved."""
    return (_retained_after_forward(3, policy, fuse_qkv)
            - _retained_after_forward(1, policy, fuse_qkv)) / 2


def test_a_block_keeps_what_the_per_op_formula_counts():
    # wq, wk, wv apart: the order block_matmuls counts (input, attention output, wq, wv, w1, w2).
    measured, formula = block_bytes("selective"), per_op_layer_bytes(SHAPE, LAYOUT, FP32)
    assert measured == pytest.approx(formula, rel=TOLERANCE), (measured, formula)


def test_a_block_with_fused_qkv_keeps_what_the_per_op_formula_counts():
    # torchtitan 0.3.0's llama3 flavors fuse QKV (fuse_qkv=True): its matmuls are wqkv, wo, w1,
    # w3, w2, so SelectiveAC keeps wqkv's whole output (q + 2 kv) and replays wo and w3. The
    # order of separate projections would count wq and wv (q + kv) and miss one kv: 3,801,088
    # bytes a block against the 3,953,600 measured, 4.0% short.
    measured = block_bytes("selective", True)
    formula = per_op_layer_bytes(SHAPE, LAYOUT, FP32, fused_qkv=True)
    assert measured == pytest.approx(formula, rel=TOLERANCE), (measured, formula)
    apart = per_op_layer_bytes(SHAPE, LAYOUT, FP32)
    assert measured != pytest.approx(apart, rel=TOLERANCE)


def test_on_the_cpu_the_stock_policy_replays_attention():
    # The stock save list lacks the CPU flash op: its output and log-sum-exp are not kept.
    attention_outputs = TOKENS * (SHAPE.num_heads * SHAPE.head_dim + HEADS) * FP32
    assert block_bytes("selective") - block_bytes("selective-stock") == attention_outputs


def test_no_checkpointing_keeps_more_and_full_checkpointing_keeps_the_input():
    selective = block_bytes("selective")
    assert block_bytes("none") > selective > block_bytes("full")
    full = activation_bytes_per_layer(SHAPE, BATCH, 1, "full", "fp32")  # the block's input
    assert block_bytes("full") == pytest.approx(full, rel=TOLERANCE)
