"""The cost model's mixture-of-experts terms: expert memory, dispatch, grouped GEMMs, overlap.

Each test changes one knob and checks the term it should move, and only that term; dense
models' estimates are compared to the values the model gave before it priced experts.
"""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.experts import (
    expert_dp,
    expert_params_per_rank,
    gathered_expert_bytes,
    moe_activation_extra,
    moe_layers_per_rank,
)
from orchestrator.costmodel.memory import (
    DTYPE_BYTES,
    memory_per_device,
    params_on_first_stage,
)
from orchestrator.costmodel.moe_time import (
    dispatch_comm,
    ep_mesh,
    expert_gemm_efficiency,
    moe_tp_layers,
)
from orchestrator.trainers.megatron.runtime import megatron_lm_runtime
from orchestrator.trainers.registry import adapter
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS, ModelShape
from orchestrator.space import Layout

H100 = CLUSTER_PRESETS["h100-80g"]
MIXTRAL = MODEL_PRESETS["mixtral-8x22b"]
QWEN2 = MODEL_PRESETS["qwen2-57b-a14b"]
MEGATRON = megatron_lm_runtime()


def mixtral(**changes) -> Layout:
    """The published Mixtral 8x22B layout on 128 GPUs, with `changes`."""
    base = dict(tp=2, pp=8, dp=8, ep=8, etp=1, zero_stage=1, micro_batch_size=1,
                grad_accum_steps=32, sequence_parallel=True)
    return Layout(**{**base, **changes})


def estimate_of(model, config, runtime=MEGATRON, cluster=H100):
    return CostModel(model, cluster, 8, runtime=runtime).estimate(config)


# Memory and step time of dense layouts before the model priced experts (costmodel at the
# commit that added the ep knob): the MoE terms must leave them exactly as they were. The
# llama-70b row's step time is the one since selective recompute is priced as one forward of
# core attention.
DENSE_BEFORE = [
    ("llama-7b", "a800-80g", 8, dict(dp=64, zero_stage=1, grad_accum_steps=16), "deepspeed",
     45739359872.0, 7.661122950738672),
    ("llama-70b", "h100-80g", 8, dict(tp=8, pp=4, dp=4, zero_stage=1, grad_accum_steps=32,
                                      sequence_parallel=True,
                                      activation_checkpointing="selective"), "deepspeed",
     36233738880.0, 4.955230815420478),
    ("gpt-175b", "frontier", 8, dict(tp=4, pp=16, dp=16, zero_stage=1, micro_batch_size=2,
                                     grad_accum_steps=48, activation_checkpointing="full",
                                     pp_schedule="interleaved", virtual_stages=2), "builtin",
     35544992384.0, 55.301072579770995),
    ("llama-13b", "a100-80g", 8, dict(tp=2, dp=32, zero_stage=3, micro_batch_size=2,
                                      grad_accum_steps=4), "torchtitan",
     31131092160.0, 6.274887399220512),
    ("tiny", "cpu-local", 2, dict(dp=2, zero_stage=2, micro_batch_size=4, grad_accum_steps=2),
     "builtin", 1184596096.0, 0.8253705312),
]


@pytest.mark.parametrize("model,cluster,gpn,layout,trainer,memory,step", DENSE_BEFORE,
                         ids=[row[0] for row in DENSE_BEFORE])
def test_dense_estimates_are_unchanged(model, cluster, gpn, layout, trainer, memory, step):
    runtime = adapter(trainer).runtime
    e = CostModel(MODEL_PRESETS[model], CLUSTER_PRESETS[cluster], gpn,
                  runtime=runtime).estimate(Layout(**layout))
    assert e.memory.total == pytest.approx(memory, rel=1e-12)
    assert e.step_time_s == pytest.approx(step, rel=1e-12)
    assert e.time.ep_comm_s == 0.0


def test_expert_weights_halve_when_ep_doubles():
    """Experts split over ep ranks; the weights outside them do not move."""
    four, eight = estimate_of(MIXTRAL, mixtral(ep=4)), estimate_of(MIXTRAL, mixtral(ep=8))
    experts4 = expert_params_per_rank(MIXTRAL, mixtral(ep=4))
    experts8 = expert_params_per_rank(MIXTRAL, mixtral(ep=8))
    assert experts8 == pytest.approx(experts4 / 2)
    assert experts8 == 7 * 8 * MIXTRAL.expert_params / 8  # 7 MoE layers a stage, 8 experts
    weight_bytes = DTYPE_BYTES["bf16-mixed"][0]
    assert four.memory.params - eight.memory.params == pytest.approx(
        weight_bytes * (experts4 - experts8))


def test_expert_optimizer_states_shard_over_expert_dp_not_dp():
    """ZeRO-1 over expert-DP = tp x dp / (ep x etp) = 2 for the experts, dp = 8 elsewhere."""
    config = mixtral()
    assert expert_dp(config) == 2
    optimizer_bytes = DTYPE_BYTES["bf16-mixed"][2]
    outside = params_on_first_stage(MIXTRAL, config)
    experts = expert_params_per_rank(MIXTRAL, config)
    assert estimate_of(MIXTRAL, config).memory.optimizer == pytest.approx(
        optimizer_bytes * (outside / 8 + experts / 2))


def test_etp_splits_each_expert():
    both = expert_params_per_rank(MIXTRAL, mixtral(ep=4, etp=2))
    assert both == pytest.approx(expert_params_per_rank(MIXTRAL, mixtral(ep=8)))
    assert expert_params_per_rank(MIXTRAL, mixtral(ep=4, etp=None)) == pytest.approx(both)


def test_zero3_gathers_only_the_local_experts():
    config = mixtral(zero_stage=3)
    local = gathered_expert_bytes(MIXTRAL, config, 2)
    assert local == 2 * 2 * MIXTRAL.expert_params  # 1 expert a rank, current and prefetched
    assert local < 2 * 2 * MIXTRAL.num_experts * MIXTRAL.expert_params / 4


def test_moe_layers_per_rank_counts_the_busiest_stage():
    deepseek = MODEL_PRESETS["deepseek-v3-671b"].model_copy(update={"num_layers": 64})
    # 64 layers over 16 stages of 4: the first stage holds the 3 dense layers and 1 MoE layer.
    assert moe_layers_per_rank(deepseek, Layout(pp=16, dp=128, ep=64)) == 4
    assert moe_layers_per_rank(MIXTRAL, mixtral()) == 7
    assert moe_layers_per_rank(MODEL_PRESETS["llama-7b"], Layout()) == 0


def test_dispatch_is_free_at_ep_1_and_grows_across_nodes():
    fabric = Fabric.of(H100, 8, 0.8)
    no_ep = Layout(tp=1, pp=4, dp=32, ep=1, micro_batch_size=1, grad_accum_steps=8)
    assert dispatch_comm(QWEN2, no_ep, fabric, 8, 2, 1.0) == 0.0
    one_node = dataclasses.replace(no_ep, ep=8)
    two_nodes = dataclasses.replace(no_ep, ep=16)
    assert ep_mesh(one_node, 8) == (8, 1) and ep_mesh(two_nodes, 8) == (8, 2)
    assert 0 < dispatch_comm(QWEN2, one_node, fabric, 8, 2, 1.0) \
        < dispatch_comm(QWEN2, two_nodes, fabric, 8, 2, 1.0)


def test_dispatch_volume_is_four_all_to_alls_of_t_k_h():
    """≈ 4 x T x k x h x bytes x (ep-1)/ep per MoE layer and micro-batch at link bandwidth."""
    fabric = Fabric.of(H100, 8, 0.8).bandwidth_only()
    config = Layout(tp=1, pp=4, dp=32, ep=8, micro_batch_size=1, grad_accum_steps=8)
    tokens, k, h = QWEN2.seq_len, QWEN2.experts_per_token, QWEN2.hidden
    per_layer_micro = 4 * tokens * k * h * 2 * (8 - 1) / 8 / fabric.intra_bw
    layers = moe_layers_per_rank(QWEN2, config)
    assert dispatch_comm(QWEN2, config, fabric, 8, 2, 1.0) == pytest.approx(
        per_layer_micro * layers * 8)
    assert dispatch_comm(QWEN2, config, fabric, 8, 2, 1.25) == pytest.approx(
        1.25 * per_layer_micro * layers * 8)


def test_full_recompute_replays_the_forward_dispatch():
    fabric = Fabric.of(H100, 8, 0.8).bandwidth_only()
    plain = mixtral()
    full = mixtral(activation_checkpointing="full")
    assert dispatch_comm(MIXTRAL, full, fabric, 8, 2, 1.0) == pytest.approx(
        1.5 * dispatch_comm(MIXTRAL, plain, fabric, 8, 2, 1.0))


def test_grouped_gemms_run_faster_with_more_tokens_per_expert():
    """Tokens per local expert = T x k x ep / num_experts: fine-grained experts see fewer."""
    small = expert_gemm_efficiency(H100, QWEN2, Layout(tp=1, pp=4, dp=16, ep=1))
    large = expert_gemm_efficiency(H100, QWEN2, Layout(tp=1, pp=4, dp=16, ep=16))
    assert small < large <= H100.compute_efficiency
    assert expert_gemm_efficiency(H100, MIXTRAL, mixtral()) > large


def test_imbalance_slows_experts_only():
    balanced = CostModel(MIXTRAL, H100, 8, runtime=MEGATRON)
    skewed = balanced.with_coefficients(balanced.coefficients.with_(expert_load_imbalance=1.5))
    a, b = balanced.estimate(mixtral()), skewed.estimate(mixtral())
    assert b.time.compute_s > a.time.compute_s and b.time.ep_comm_s > a.time.ep_comm_s
    assert b.time.tp_comm_s == a.time.tp_comm_s and b.memory.params == a.memory.params
    assert b.memory.activations > a.memory.activations


def test_expert_gradients_reduce_over_expert_dp():
    """With ep x etp = tp x dp the experts have no data-parallel replica: nothing to reduce."""
    whole = Layout(tp=1, pp=4, dp=16, ep=16, zero_stage=1, micro_batch_size=1,
                           grad_accum_steps=8)
    half = dataclasses.replace(whole, ep=8)
    assert expert_dp(whole) == 1 and expert_dp(half) == 2
    assert (estimate_of(QWEN2, half).time.dp_comm.total
            > estimate_of(QWEN2, whole).time.dp_comm.total)


def test_dispatch_is_exposed_unless_the_trainer_overlaps_it():
    plain = estimate_of(MIXTRAL, mixtral())
    overlapped = estimate_of(MIXTRAL, mixtral(), megatron_lm_runtime(
        ["--overlap-moe-expert-parallel-comm"]))
    assert plain.time.ep_comm_s > 0
    assert overlapped.time.ep_comm_s < plain.time.ep_comm_s
    assert overlapped.time.compute_s == plain.time.compute_s


def test_moe_layers_keep_only_their_attentions_tp_collectives():
    assert moe_tp_layers(MIXTRAL, mixtral()) == 7 - 7 / 2
    assert moe_tp_layers(QWEN2, Layout(tp=2, pp=4, dp=8, ep=4, etp=1,
                                               sequence_parallel=True)) == 7  # shared experts
    assert moe_tp_layers(MODEL_PRESETS["llama-7b"], Layout(tp=2, dp=4)) == 32


def test_moe_layers_keep_their_experts_activations():
    """Mixtral keeps more per layer than Korthikanti's dense MLP (k = 2 experts of 16,384);
    full recompute keeps only the layer inputs, expert or not."""
    def activations(config):
        return memory_per_device(MIXTRAL, config, gpus_per_node=8, capacity_gb=80,
                                 runtime_overhead_gb=1).activations
    dense_like = MIXTRAL.model_copy(update={"num_experts": 0})
    dense = memory_per_device(dense_like, mixtral(ep=1, etp=None), gpus_per_node=8,
                              capacity_gb=80, runtime_overhead_gb=1).activations
    assert activations(mixtral()) > dense
    full = mixtral(activation_checkpointing="full")
    dense_full = memory_per_device(dense_like, dataclasses.replace(full, ep=1, etp=None),
                                   gpus_per_node=8, capacity_gb=80,
                                   runtime_overhead_gb=1).activations
    replayed = moe_activation_extra(MIXTRAL, full, "none", 2, 1.0)  # the layer recomputing
    assert activations(full) == pytest.approx(dense_full + replayed)


def test_estimate_reports_moe_mfu_both_ways():
    e = estimate_of(MIXTRAL, mixtral())
    assert e.fits and 0 < e.mfu_causal < e.mfu == e.hfu < 1
    assert 0.5 < e.compute_efficiency < H100.compute_efficiency


def test_a_per_node_dispatch_sends_a_token_once_per_node_it_reaches():
    from orchestrator.costmodel.moe_time import dispatch_comm, off_node_copies

    deepseek = MODEL_PRESETS["deepseek-v3-671b"]
    assert off_node_copies(deepseek, 8) == pytest.approx(4 * 7 / 8)  # node-limited: M = 4
    free = deepseek.model_copy(update={"moe_router_num_groups": None,
                                       "moe_router_group_topk": None})
    assert off_node_copies(free, 8) == pytest.approx(7 * (1 - (7 / 8) ** 8))
    assert off_node_copies(free, 8) < 8 * 7 / 8  # fewer than every (token, expert) copy
    config = Layout(pp=16, dp=128, ep=64)
    fabric = Fabric.of(CLUSTER_PRESETS["h800-80g"], 8, 0.8)
    per_pair, per_node = (dispatch_comm(deepseek, config, fabric, 8, 2, 1.0, per_node=flag)
                          for flag in (False, True))
    assert per_node < per_pair / 1.8


def test_group_limited_routing_needs_both_fields_that_fit():
    base = MODEL_PRESETS["deepseek-v3-671b"]
    for update, words in [({"moe_router_group_topk": None}, "go together"),
                          ({"moe_router_num_groups": 7}, "must divide num_experts")]:
        with pytest.raises(ValueError, match=words):
            ModelShape(**{**base.model_dump(), **update})
