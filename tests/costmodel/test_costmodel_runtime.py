"""The cost of a ZeRO stage follows the trainer that runs it (costmodel/zero_engine.py)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import ROOT

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.memory import params_on_first_stage
from orchestrator.costmodel.zero_engine import DEEPSPEED
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for
from orchestrator.trainers.megatron.flags import MEGATRON_LM_FLAGS
from orchestrator.trainers.megatron.runtime import MEGATRON_OVERLAP_FLAG, megatron_lm_runtime
from orchestrator.trainers.registry import adapter

A800 = CLUSTER_PRESETS["a800-80g"]
MODEL = MODEL_PRESETS["llama-7b"]
BUILTIN = adapter("builtin").runtime
TORCHTITAN = adapter("torchtitan").runtime


def comm(runtime, zero_stage: int, gas: int):
    cost = CostModel(MODEL, A800, 8, runtime=runtime)
    config = Layout(dp=8, zero_stage=zero_stage, micro_batch_size=1, grad_accum_steps=gas)
    return cost.estimate(config).time.dp_comm


def fabric() -> Fabric:
    return Fabric.of(A800, 8, CostModel(MODEL, A800, 8).coefficients.bandwidth_efficiency)


def block_collectives():
    """(all-gather, reduce-scatter) of one FSDP unit: 32 blocks and the root, bf16 weights
    gathered (FSDP2's param_dtype), float32 gradients reduced (its reduce_dtype)."""
    unit = MODEL.num_params / 33
    return fabric().all_gather(2 * unit, 8), fabric().reduce_scatter(4 * unit, 8)


def test_pytorch_trainers_reduce_float32_gradients_and_zero1_broadcasts_each_owners_shard():
    """Under autocast the built-in trainer's weights and gradients are float32: DDP all-reduces
    4 bytes per parameter where DeepSpeed's bf16 ZeRO-1 reduces 2, and ZeroRedundancyOptimizer
    (one flat bucket per rank) broadcasts each of the 8 owners' float32 shards."""
    ddp, deepspeed = comm(BUILTIN, 0, gas=1), comm(DEEPSPEED, 1, gas=1)
    bucket = CostModel(MODEL, A800, 8).coefficients.bucket_bytes
    assert ddp.t_os0 == pytest.approx(fabric().bucketed_all_reduce(4 * MODEL.num_params,
                                                                   bucket, 8))
    assert deepspeed.t_os0 == pytest.approx(fabric().bucketed_all_reduce(2 * MODEL.num_params,
                                                                         bucket, 8))
    zero1 = comm(BUILTIN, 1, gas=1)
    assert zero1.t_os0 == pytest.approx(ddp.t_os0)
    assert zero1.t_os1 == pytest.approx(8 * fabric().broadcast(4 * MODEL.num_params / 8, 8))


def test_ddp_follows_the_trainer_deepspeeds_reduces_bf16_after_the_backward():
    """Stage 0 on DeepSpeed's engine (the DeepSpeed and Megatron-DeepSpeed trainers) reduces
    bf16 gradients once the backward is over: 2 bytes a parameter, nothing hidden. PyTorch's
    DDP (the built-in trainer) and Megatron-LM's reduce float32 behind the backward."""
    for trainer in ("deepspeed", "megatron-deepspeed"):
        runtime = adapter(trainer).runtime
        deepspeed = comm(runtime, 0, gas=4)
        bucket = CostModel(MODEL, A800, 8).coefficients.bucket_bytes
        assert deepspeed.t_os0 == pytest.approx(
            fabric().bucketed_all_reduce(2 * MODEL.num_params, bucket, 8))
        assert deepspeed.t_g == deepspeed.t_p == deepspeed.t_os1 == 0.0  # once, at the boundary
        step = CostModel(MODEL, A800, 8, runtime=runtime).estimate(
            Layout(dp=8, micro_batch_size=1, grad_accum_steps=4)).time
        assert step.dp_exposed_s == pytest.approx(deepspeed.t_os0)
        for stage in (1, 2, 3):  # the ZeRO stages were DeepSpeed's already
            assert comm(runtime, stage, gas=4) == comm(DEEPSPEED, stage, gas=4)
    torch_ddp = comm(BUILTIN, 0, gas=4)
    # Megatron-LM's DDP reduces the same float32 bytes, in buckets of 40M parameters (its
    # default at 8 replicas) rather than PyTorch's 25 MB.
    megatron_ddp = comm(adapter("megatron-lm").runtime, 0, gas=4)
    assert megatron_ddp.t_os0 == pytest.approx(
        fabric().bucketed_all_reduce(4 * MODEL.num_params, 4 * 40_000_000, 8))
    assert (megatron_ddp.t_p, megatron_ddp.t_g, megatron_ddp.t_os1) == (
        torch_ddp.t_p, torch_ddp.t_g, torch_ddp.t_os1)
    assert torch_ddp.t_os0 == pytest.approx(2 * comm(adapter("deepspeed").runtime, 0, 4).t_os0,
                                            rel=0.05)
    step = CostModel(MODEL, A800, 8, runtime=BUILTIN).estimate(
        Layout(dp=8, micro_batch_size=1, grad_accum_steps=4)).time
    assert step.dp_exposed_s < torch_ddp.t_os0


def test_megatron_lm_hides_its_ddp_reduction_only_with_its_overlap_flag():
    """Megatron-LM reduces float32 gradients as PyTorch's DDP does, but behind the backward
    only with --overlap-grad-reduce; so does its distributed optimizer (ZeRO-1), whose
    reduce-scatter is timed alike either way (test_megatron_gradient_sync.py)."""
    config = Layout(dp=8, micro_batch_size=1, grad_accum_steps=4)

    def step(runtime, layout=config):
        return CostModel(MODEL, A800, 8, runtime=runtime).estimate(layout).time

    default = megatron_lm_runtime(["--lr=1e-4"])
    overlapped = megatron_lm_runtime(["--lr=1e-4", MEGATRON_OVERLAP_FLAG])
    assert step(default).dp_comm == step(overlapped).dp_comm
    assert step(default).dp_exposed_s == pytest.approx(step(default).dp_comm.t_os0)
    assert step(overlapped).dp_exposed_s < step(default).dp_exposed_s
    zero1 = dataclasses.replace(config, zero_stage=1)
    assert step(default, zero1).dp_comm == step(overlapped, zero1).dp_comm
    assert step(default, zero1).dp_exposed_s == pytest.approx(step(default, zero1).dp_comm.total)
    assert step(overlapped, zero1).dp_exposed_s < step(default, zero1).dp_exposed_s
    spec = load_spec(ROOT / "examples" / "megatron-lm.yaml")
    assert cost_model_for(spec).runtime.ddp_overlaps == (
        MEGATRON_OVERLAP_FLAG in spec.trial.megatron.args)
    assert MEGATRON_OVERLAP_FLAG in MEGATRON_LM_FLAGS  # a switch of Megatron-LM's own parser


def test_zero2_gathers_weights_per_micro_batch_on_fsdp2_but_not_on_deepspeed():
    """The built-in trainer's ZeRO-2 is FSDP2 without resharding after forward: weights sharded
    at rest, gathered once per micro-batch, gradients reduce-scattered once per step.
    DeepSpeed's ZeRO-2 keeps whole weights and all-reduces gradients per micro-batch."""
    gather, scatter = block_collectives()
    fsdp = comm(BUILTIN, 2, gas=4)
    assert fsdp.t_p == pytest.approx(33 * (4 * gather + scatter))
    assert fsdp.t_g == fsdp.t_os0 == fsdp.t_os1 == 0.0
    deepspeed = comm(DEEPSPEED, 2, gas=4)
    assert deepspeed.t_p == 0.0 and deepspeed.t_g > 0.0 and deepspeed.t_os1 > 0.0


def test_zero3_reduces_gradients_once_on_the_builtin_trainer_and_per_micro_batch_on_torchtitan():
    """FSDP2 gathers a block's weights for forward and backward of every micro-batch; the
    built-in trainer turns gradient sync off until the last micro-batch, torchtitan does not."""
    gather, scatter = block_collectives()
    assert comm(BUILTIN, 3, gas=4).t_p == pytest.approx(33 * (8 * gather + scatter))
    assert comm(TORCHTITAN, 3, gas=4).t_p == pytest.approx(33 * (8 * gather + 4 * scatter))
    assert comm(BUILTIN, 3, gas=1).t_p == pytest.approx(comm(TORCHTITAN, 3, gas=1).t_p)


def test_ddp_all_reduces_after_every_micro_batch_only_where_the_trainer_syncs_each():
    once, each = comm(BUILTIN, 0, gas=4), comm(TORCHTITAN, 0, gas=4)
    assert once.t_g == 0.0 and once.t_os0 > 0.0
    assert each.t_g == pytest.approx(3 * each.t_os0) and each.t_os0 == pytest.approx(once.t_os0)


def test_zero_stages_differ_in_cost_on_the_builtin_trainer_at_one_micro_batch():
    """At one micro-batch DeepSpeed's ZeRO-1 and ZeRO-2 move the same bytes (no gradient sync
    before the last backward); FSDP2's ZeRO-2 gathers 33 units one by one instead."""
    step = {(runtime, z): CostModel(MODEL, A800, 8, runtime=runtime).estimate(
        Layout(dp=8, zero_stage=z, micro_batch_size=1, grad_accum_steps=1)).step_time_s
        for runtime in (DEEPSPEED, BUILTIN) for z in (1, 2)}
    assert step[DEEPSPEED, 1] == pytest.approx(step[DEEPSPEED, 2])
    assert step[BUILTIN, 2] != pytest.approx(step[BUILTIN, 1])


@pytest.mark.parametrize("example,engine", [("quickstart.yaml", "torch"),
                                            ("torchtitan.yaml", "torch"),
                                            ("deepspeed.yaml", "deepspeed"),
                                            ("megatron-lm.yaml", "deepspeed")])
def test_a_campaign_prices_zero_stages_on_its_trainers_engine(example, engine):
    cost = cost_model_for(load_spec(ROOT / "examples" / example))
    assert cost.runtime.zero_engine == engine
    config = Layout(dp=2, zero_stage=3)
    assert config.factors(2, cost.runtime.zero_engine).engine == engine
    # Calibration's copies keep the runtime.
    assert cost.with_coefficients(dataclasses.replace(cost.coefficients)).runtime == cost.runtime


def test_gradient_accumulation_without_sync_holds_whole_gradients_on_fsdp2():
    """The built-in trainer's FSDP2 keeps unsharded gradients while sync is off, so ZeRO-2/3
    with several micro-batches hold the whole gradient at the peak; torchtitan reduce-scatters
    every micro-batch and holds the shard, as DeepSpeed does."""
    def grads(runtime, zero_stage, gas):
        config = Layout(dp=8, zero_stage=zero_stage, micro_batch_size=1,
                                grad_accum_steps=gas)
        return CostModel(MODEL, A800, 8, runtime=runtime).memory(config).grads

    whole, shard = 2 * MODEL.num_params, 2 * MODEL.num_params / 8
    for zero_stage in (2, 3):
        assert grads(BUILTIN, zero_stage, 4) == pytest.approx(whole)
        assert grads(BUILTIN, zero_stage, 1) == pytest.approx(shard)
        assert grads(TORCHTITAN, zero_stage, 4) == pytest.approx(shard)
        assert grads(DEEPSPEED, zero_stage, 4) == pytest.approx(shard)


def test_a_pipeline_stage_holds_its_gathered_weights_and_whole_gradients_on_fsdp2():
    """torch.distributed.pipelining turns FSDP2's gradient sync and its resharding after
    backward off for every micro-batch but the last, whatever the trainer's loop does: with
    pp > 1 a ZeRO-3 stage holds its whole weights and gradients, on torchtitan too. DeepSpeed's
    ZeRO-3 is not run by that stage and keeps its shards."""
    config = Layout(dp=4, pp=2, zero_stage=3, micro_batch_size=1, grad_accum_steps=4)
    stage_params = params_on_first_stage(MODEL, config)
    for runtime in (BUILTIN, TORCHTITAN):
        memory = CostModel(MODEL, A800, 8, runtime=runtime).memory(config)
        assert (memory.params, memory.grads) == pytest.approx((2 * stage_params,
                                                               2 * stage_params))
    deepspeed = CostModel(MODEL, A800, 8, runtime=DEEPSPEED).memory(config)
    assert (deepspeed.params, deepspeed.grads) == pytest.approx((2 * stage_params / 4,
                                                                 2 * stage_params / 4))
    one_micro_batch = dataclasses.replace(config, grad_accum_steps=1)
    sharded = CostModel(MODEL, A800, 8, runtime=TORCHTITAN).memory(one_micro_batch)
    assert sharded.params == pytest.approx(2 * stage_params / 4)


def with_software_cost(fsdp_us: float, tp_us: float):
    return A800.model_copy(update={"fsdp_call_overhead_us": fsdp_us, "tp_call_overhead_us": tp_us})


@pytest.mark.parametrize("zero_stage,gathers", [(2, 1), (3, 2)])
def test_fsdp2_pays_its_software_cost_per_unit_collective_and_deepspeed_does_not(
        zero_stage, gathers):
    """A profiled preset's per-call cost of FSDP2 (copy-in/out, hooks) is paid per gather of a
    unit and micro-batch and per gradient reduce-scatter: 33 units here, 4 micro-batches."""
    config = Layout(dp=8, zero_stage=zero_stage, micro_batch_size=1, grad_accum_steps=4)
    priced = CostModel(MODEL, with_software_cost(500.0, 0.0), 8, runtime=BUILTIN)
    bare = CostModel(MODEL, A800, 8, runtime=BUILTIN)
    extra = priced.estimate(config).time.dp_comm.t_p - bare.estimate(config).time.dp_comm.t_p
    assert extra == pytest.approx(33 * (4 * gathers + 1) * 500e-6)
    on_deepspeed = [CostModel(MODEL, cluster, 8).estimate(config).step_time_s
                    for cluster in (with_software_cost(500.0, 0.0), A800)]
    assert on_deepspeed[0] == on_deepspeed[1]


def test_dtensor_tp_pays_its_software_cost_per_collective_as_latency():
    """Four TP collectives per layer and micro-batch (six with full recompute), each with the
    profiled DTensor cost; calibration sees it with the per-call latency, not bandwidth.
    Megatron's TP (DeepSpeed runtime: plain tensors) does not pay it."""
    priced = CostModel(MODEL, with_software_cost(0.0, 1000.0), 8, runtime=BUILTIN)
    bare = CostModel(MODEL, A800, 8, runtime=BUILTIN)
    for checkpointing, calls in (("none", 4), ("full", 6)):
        config = Layout(tp=2, dp=4, micro_batch_size=1, grad_accum_steps=2,
                                activation_checkpointing=checkpointing)
        a, b = priced.estimate(config).time, bare.estimate(config).time
        assert a.tp_comm_s - b.tp_comm_s == pytest.approx(calls * 32 * 2 * 1e-3)
        assert (a.model_parallel_latency_s - b.model_parallel_latency_s
                == pytest.approx(calls * 32 * 2 * 1e-3))
    config = Layout(tp=2, dp=4)
    assert (CostModel(MODEL, with_software_cost(0.0, 1000.0), 8).estimate(config).step_time_s
            == CostModel(MODEL, A800, 8).estimate(config).step_time_s)
