"""Megatron-LM's "local" DDP of 2021, as its source ran it (8aa4619,
megatron/model/distributed.py `allreduce_params`, called once after the backward by
training.py): every fp16 gradient flattened into one tensor and all-reduced in one call, in
fp16 unless --fp32-allreduce, which DLPerf's launch script does not pass."""

from __future__ import annotations

import pytest

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.published_names import framework_of
from orchestrator.presets import CLUSTER_PRESETS, ModelShape
from orchestrator.space import Layout

V100 = CLUSTER_PRESETS["v100-16g"]  # 8 GPUs a node, one 100 Gb/s EDR port: 12.5 GB/s
# DLPerf's GPT of 498M: 16 layers of hidden 1,536, vocabulary 51,200, sequence 2,048.
GPT_498M = ModelShape(name="gpt-498m", num_layers=16, hidden=1536, num_heads=16,
                      ffn_hidden=6144, vocab_size=51200, seq_len=2048, gated_mlp=False,
                      tied_embeddings=True)
DLPERF = "NVIDIA Megatron-LM @8aa4619 (PyTorch NGC 20.12)"


def _gradient_sync(framework: str, dp: int) -> float:
    runtime = framework_of({"framework": framework}, "dlperf").runtime
    layout = Layout(dp=dp, micro_batch_size=2, activation_checkpointing="full")
    return CostModel(GPT_498M, V100, 8, runtime=runtime).estimate(layout).time.dp_comm.t_os0


def test_dlperfs_megatron_runs_the_local_ddp_and_later_megatron_does_not():
    assert framework_of({"framework": DLPERF}, "dlperf").runtime.ddp_one_16bit_call
    later = framework_of({"framework": "Megatron-LM (Korthikanti et al. 2022)"}, "calculon")
    assert not later.runtime.ddp_one_16bit_call


def test_two_nodes_all_reduce_the_fp16_gradients_once_through_the_one_port():
    params = 12 * 16 * 1536**2 + 51200 * 1536  # 12·L·h² + V·h (Narayanan et al. 2021)
    # A ring over 16 ranks sends 2·15/16 of the buffer through each node's port, at NCCL's
    # 80% of 12.5 GB/s; one call, so the per-step latencies are a few hundred microseconds.
    ring = 2 * 15 / 16 * 2 * params / (12.5e9 * 0.8)
    assert _gradient_sync(DLPERF, 16) == pytest.approx(ring, rel=0.03)


def test_float32_buckets_would_move_twice_the_bytes():
    bucketed_fp32 = _gradient_sync("Megatron-LM (Narayanan et al. 2021)", 16)
    assert bucketed_fp32 == pytest.approx(2 * _gradient_sync(DLPERF, 16), rel=0.1)
