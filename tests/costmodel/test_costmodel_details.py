"""Cost-model pieces: AMSP factors, activation formulas, collectives, calibration, simulation."""

from __future__ import annotations

import dataclasses
import random

import pytest

from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.costmodel import CostModel, calibrate, model_state_bytes_sharded
from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.activations import activation_bytes_per_layer
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.result import TrialResult
from orchestrator.space import InvalidConfig, Layout, ShardingFactors
from orchestrator.space.search_space import amsp_factor_sets

A800 = CLUSTER_PRESETS["a800-80g"]


def test_named_schemes_map_onto_amsp_factors():
    assert ShardingFactors.named("ddp", 8, 4).as_tuple() == (1, 1, 1, 1, 1, 1)
    assert ShardingFactors.named("zero1", 8, 4).as_tuple() == (1, 1, 1, 1, 8, 4)
    assert ShardingFactors.named("zero2", 8, 4).as_tuple() == (1, 1, 8, 4, 8, 4)
    assert ShardingFactors.named("zero3", 8, 4).as_tuple() == (8, 4, 8, 4, 8, 4)
    assert ShardingFactors.named("mics", 8, 4, group=16).as_tuple() == (8, 2, 8, 2, 8, 2)
    assert ShardingFactors.named("hsdp", 8, 4, group=4).as_tuple() == (4, 1, 4, 1, 4, 1)


def test_amsp_memory_formula():
    """2Ψ/s_p + 2Ψ/s_g + 12Ψ/s_os (AMSP §IV-D)."""
    states = model_state_bytes_sharded(7e9, ShardingFactors(1, 1, 1, 1, 8, 1))
    assert states.total == pytest.approx(2 * 7e9 + 2 * 7e9 + 12 * 7e9 / 8)


@pytest.mark.parametrize("bad,words", [
    ((2, 1, 1, 1, 8, 1), "s0p(2) <= s0g(1)"),          # (3) ordering
    ((1, 1, 1, 1, 3, 1), "s0os(3) does not divide"),   # (5) divisibility
    ((1, 1, 1, 1, 4, 2), "fill a node first"),         # (7)
    ((1, 1, 2, 1, 8, 1), "s_g(2) must equal"),          # s_g ∈ {s_p, s_os}
])
def test_amsp_constraints(bad, words):
    with pytest.raises(InvalidConfig, match=words.replace("(", r"\(").replace(")", r"\)")):
        ShardingFactors(*bad).validate(8, 4)


def test_amsp_enumeration_meets_every_constraint():
    sets = amsp_factor_sets(8, 16)
    assert len(sets) == len(set(sets)) > 50
    for f in sets:
        f.validate(8, 16)
    assert ShardingFactors(1, 1, 1, 1, 8, 1) in sets and ShardingFactors(8, 16, 8, 16, 8, 16) in sets


def test_activation_formulas_follow_korthikanti_table_2():
    model = MODEL_PRESETS["gpt-22b"]
    s, b, h, a, t = model.seq_len, 1, model.hidden, model.num_heads, 8
    sbh = s * b * h
    act = lambda ac, **kw: activation_bytes_per_layer(model, b, t, ac, "bf16-mixed", **kw)  # noqa: E731
    assert act("none", flash_attention=False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act("none", flash_attention=False, sequence_parallel=True) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert act("selective", sequence_parallel=True) == pytest.approx(34 * sbh / t)
    assert act("full") == pytest.approx(2 * sbh)
    assert act("none", flash_attention=True) == act("selective")  # no s² term either way


def test_pipeline_schedules_hold_different_micro_batches():
    cost = CostModel(MODEL_PRESETS["gpt-22b"], A800, 8)
    base = Layout(pp=4, dp=2, micro_batch_size=1, grad_accum_steps=16)
    gpipe = cost.memory(dataclasses.replace(base, pp_schedule="gpipe")).activations
    one_f_one_b = cost.memory(base).activations
    assert gpipe == pytest.approx(one_f_one_b * 16 / 4)
    inter = cost.estimate(dataclasses.replace(base, pp_schedule="interleaved", virtual_stages=2))
    plain = cost.estimate(base)
    assert inter.time.bubble_s == pytest.approx(plain.time.bubble_s / 2)


def test_collectives_two_level():
    fabric = Fabric.of(A800, 8, bandwidth_efficiency=1.0)
    call = A800.collective_base_latency_us * 1e-6  # once per collective
    # α + the half-bandwidth chunk, per ring step (NVLink; the network, a node's 100 GB/s / 8)
    step_intra = A800.intra_node_latency_us * 1e-6 + A800.msg_half_bytes / 200e9
    step_inter = A800.inter_node_latency_us * 1e-6 + A800.msg_half_bytes / 12.5e9
    v = 1e9
    # Inside a node: ring all-reduce moves 2(p-1)/p of the buffer at NVLink speed; the tree's
    # latency 2·(p0-1) steps equals the ring's inside one node.
    assert fabric.all_reduce(v, 8) == pytest.approx(call + 2 * 7 / 8 * v / 200e9 + 14 * step_intra)
    # Across 16 nodes the node's NICs (100 GB/s shared by 8 GPUs) bound a flat ring, and every
    # one of its 127 steps waits on a network hop.
    nic_bound = 127 / 128 * v / (8 * 12.5e9)
    assert fabric.all_gather(v, 8, 16) == pytest.approx(call + nic_bound + 127 * step_inter)
    assert fabric.all_gather(v, 8, 16) > 2 * fabric.all_gather(v, 8)
    # All-reduce across nodes takes the double binary tree: log2 latency, not (p-1).
    tree = 2 * (7 * step_intra + 4 * step_inter)
    assert fabric.all_reduce(v, 8, 16) == pytest.approx(call + 2 * nic_bound + tree)
    assert fabric.all_reduce(v, 1) == 0.0 and fabric.broadcast(v, 1) == 0.0
    # The bandwidth-only fabric (calibration's β part) drops the call cost with the steps'.
    assert fabric.bandwidth_only().all_gather(v, 8, 16) == pytest.approx(nic_bound)


def test_ring_latency_grows_with_ring_length():
    """A small all-gather over 1,024 ranks costs ~100x one over 8 nodes' worth of a node."""
    fabric = Fabric.of(A800, 8, bandwidth_efficiency=0.8)
    small = 1e6
    assert fabric.all_gather(small, 8, 128) > 10 * fabric.all_gather(small, 8, 8)
    assert fabric.all_gather(small, 8, 128) > 1e-3  # ms-scale: 1,023 network steps
    assert fabric.all_reduce(small, 8, 128) < fabric.all_gather(small, 8, 128)  # tree wins


def test_compute_efficiency_grows_with_the_gemm_shape():
    from orchestrator.costmodel.compute import gemm_efficiency
    model = MODEL_PRESETS["gpt-175b"]
    eff = [gemm_efficiency(CLUSTER_PRESETS["frontier"], model, Layout(tp=t, micro_batch_size=b))
           for t, b in ((8, 1), (4, 1), (4, 4))]
    assert eff[0] < eff[1] < eff[2] < CLUSTER_PRESETS["frontier"].compute_efficiency


def test_the_optimizer_step_prices_the_shard_a_rank_updates():
    """A measured AdamW time per parameter, over Ψ (DDP) or Ψ/dp (ZeRO-1): unpriced at 0."""
    cluster = A800.model_copy(update={"optimizer_ns_per_param": 2.0})
    cost = CostModel(MODEL_PRESETS["llama-7b"], cluster, 8)
    base = Layout(dp=8, micro_batch_size=1, grad_accum_steps=1)
    psi = cost.model.num_params
    for scheme, shard in (("ddp", 1), ("zero1", 8)):
        config = dataclasses.replace(base, sharding=ShardingFactors.named(scheme, 8, 1))
        priced = cost.estimate(config).time
        assert priced.optimizer_s == pytest.approx(2e-9 * psi / shard)
        unpriced = CostModel(MODEL_PRESETS["llama-7b"], A800, 8).estimate(config).time
        assert unpriced.optimizer_s == 0
        assert priced.total_s == pytest.approx(unpriced.total_s + priced.optimizer_s)


def test_sharded_schemes_gather_per_module():
    """ZeRO-3 issues 3 collectives per linear module, layer and micro-batch: 7 per LLaMA layer;
    FSDP 3 per block and 3 for the root module (embeddings and head)."""
    cost = CostModel(MODEL_PRESETS["llama-7b"], A800, 8)
    base = Layout(dp=8, micro_batch_size=1, grad_accum_steps=1)
    z3 = cost.estimate(dataclasses.replace(base, sharding=ShardingFactors.named("zero3", 8, 1)))
    fabric = Fabric.of(A800, 8, cost.coefficients.bandwidth_efficiency)
    unit = 2 * cost.model.num_params / (32 * 7)
    assert z3.time.dp_comm.t_p == pytest.approx(32 * 7 * 3 * fabric.all_gather(unit, 8))
    # FSDP wraps a whole block: one gather of the layer's weights, not seven.
    fsdp = cost.estimate(dataclasses.replace(base, sharding=ShardingFactors.named("fsdp", 8, 1)))
    block = cost.model.num_params / 33  # bf16 weights gathered, float32 gradients reduced
    assert fsdp.time.dp_comm.t_p == pytest.approx(
        33 * (2 * fabric.all_gather(2 * block, 8) + fabric.reduce_scatter(4 * block, 8)))


def test_calibration_recovers_a_known_efficiency_and_overhead():
    """Trials generated from the model with compute 1.5x slower and 2 ms per layer and
    micro-batch of launch cost: the fit recovers both and ranks the trials perfectly."""
    model = MODEL_PRESETS["llama-7b"]
    cost = CostModel(model, A800, 8)
    configs = [Layout(dp=8, zero_stage=z, micro_batch_size=m, grad_accum_steps=8 // m,
                              activation_checkpointing=ac)
               for z in (1, 3) for m in (1, 2, 8) for ac in ("none", "full")]
    truth = cost.with_coefficients(cost.coefficients.with_(scale_compute=1.5, launch_overhead_s=2e-3))
    rng = random.Random(0)
    measured = []
    for i, c in enumerate(configs):
        est = truth.estimate(c)
        step = est.step_time_s * (1 + rng.gauss(0, 0.01))
        measured.append((f"t{i}", c, TrialResult(status="ok", step_time_s=step,
                                                 tokens_per_s=est.tokens_per_step / step,
                                                 peak_memory_gb=est.memory_gb_used * 0.9)))
    measured.append(("bad", configs[0], TrialResult(status="oom", error="x")))  # ignored
    fit = calibrate(cost, measured)
    assert fit is not None and len(fit.trials) == len(configs)
    assert fit.multipliers["compute"] == pytest.approx(1.5, rel=0.05)
    assert fit.multipliers["launches"] == pytest.approx(2e-3, rel=0.25)
    assert fit.median_abs_error < 0.02 and fit.spearman > 0.95
    assert fit.memory_scale == pytest.approx(0.9, rel=0.01)
    assert calibrate(cost, measured[:2]) is None  # too few trials to fit


def test_calibration_fits_tensor_parallel_latency_apart_from_bandwidth():
    """A cluster whose TP all-reduces pay 20x the preset's per-step latency but see its
    bandwidth (gloo on loopback against NCCL): one multiplier on TP communication cannot
    fit micro-batch 1 (many small all-reduces) and micro-batch 8 (few large ones) at once;
    fitting latency and bandwidth apart recovers both."""
    model = MODEL_PRESETS["llama-7b"]
    cost = CostModel(model, A800, 8)
    configs = [Layout(tp=t, dp=8 // t, zero_stage=1, micro_batch_size=m,
                              grad_accum_steps=8 // m)
               for t in (1, 2, 4, 8) for m in (1, 2, 8)]
    truth = cost.with_coefficients(cost.coefficients.with_(scale_model_parallel_latency=20.0))
    measured = []
    for i, c in enumerate(configs):
        est = truth.estimate(c)
        measured.append((f"t{i}", c, TrialResult(status="ok", step_time_s=est.step_time_s,
                                                 tokens_per_s=est.tokens_per_s)))
    assert truth.estimate(configs[3]).time.model_parallel_latency_s > 0
    fit = calibrate(cost, measured)
    assert fit.multipliers["model_parallel_latency"] == pytest.approx(20.0, rel=0.05)
    assert fit.multipliers["model_parallel_comm"] == pytest.approx(1.0, rel=0.05)
    assert fit.median_abs_error < 1e-3


def test_calibration_fits_weight_gathers_apart_from_gradient_sync():
    """Weight gathers hide by prefetch, gradient reduction behind the backward: a cluster that
    exposes 90% of one and 30% of the other is fitted as such; a campaign that measured no
    sharded weights, or too few trials, predicts them with the gradients' fraction."""
    cost = CostModel(MODEL_PRESETS["llama-7b"], A800, 8)
    configs = [Layout(dp=64, zero_stage=z, micro_batch_size=m, grad_accum_steps=8 // m)
               for z in (0, 1, 2, 3) for m in (1, 2, 4, 8)]
    truth = cost.with_coefficients(cost.coefficients.with_(dp_exposure=0.3,
                                                           dp_exposure_gathers=0.9))

    def measure(config):
        est = truth.estimate(config)
        return TrialResult(status="ok", step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s)

    fit = calibrate(cost, [(f"t{i}", c, measure(c)) for i, c in enumerate(configs)])
    assert fit.multipliers["data_parallel_gathers"] == pytest.approx(0.9, rel=0.05)
    assert fit.multipliers["data_parallel_comm"] == pytest.approx(0.3, rel=0.05)
    unsharded = [(f"t{i}", c, measure(c)) for i, c in enumerate(configs) if c.zero_stage < 3]
    fit = calibrate(cost, unsharded)
    assert fit.multipliers["data_parallel_gathers"] == fit.multipliers["data_parallel_comm"]
    # Seven trials for four terms: too few to fit gathers apart, enough for three terms.
    few = [(f"t{i}", c, measure(c)) for i, c in enumerate(configs[::2][:7])]
    assert any(c.zero_stage == 3 for _, c, _ in few)
    fit = calibrate(cost, few)
    assert fit.global_scale is None
    assert fit.multipliers["data_parallel_gathers"] == fit.multipliers["data_parallel_comm"]
    z3 = fit.model.estimate(configs[-1]).time
    pooled = fit.multipliers["data_parallel_comm"]
    assert z3.dp_exposed_s == pytest.approx(pooled * z3.dp_comm.total)

def test_simulated_backend_is_seeded_and_fails_honestly():
    cost = CostModel(MODEL_PRESETS["llama-7b"], A800, 8)
    fits = Layout(dp=8, zero_stage=3, micro_batch_size=1, grad_accum_steps=1)
    too_big = Layout(dp=8, zero_stage=0, micro_batch_size=1, grad_accum_steps=1)
    sim = SimulatedBackend(cost, noise=0.05, seed=1)
    a, b = sim.run(fits, "t1"), sim.run(fits, "t1")
    assert a == b and a.ok and a.tokens_per_s == pytest.approx(cost.estimate(fits).tokens_per_s, rel=0.25)
    assert sim.run(fits, "t2").tokens_per_s != a.tokens_per_s  # noise differs per trial
    oom = sim.run(too_big, "t3")
    assert oom.status == "oom" and "GB" in oom.error
    flaky = SimulatedBackend(cost, failure_rate=0.5, seed=2)
    statuses = [flaky.run(fits, f"t{i}").status for i in range(300)]
    faults = len(statuses) - statuses.count("ok")
    assert 110 < faults < 190  # half of them
    assert min(statuses.count(s) for s in ("failed", "timeout", "oom")) > 25  # in equal shares


def test_hidden_perturbations_move_the_truth_away_from_the_model():
    cost = CostModel(MODEL_PRESETS["llama-7b"], A800, 8)
    config = Layout(dp=8, zero_stage=3, micro_batch_size=1, grad_accum_steps=1)
    plain = SimulatedBackend(cost, noise=0.0).run(config, "t").tokens_per_s
    factors = [SimulatedBackend(cost, noise=0.0, perturbation=0.2, seed=s).truth_factor(config.to_params())
               for s in range(50)]
    assert plain == pytest.approx(cost.estimate(config).tokens_per_s)
    assert min(factors) < 0.85 and max(factors) > 1.15


def test_zero_plus_plus_trades_memory_for_intra_node_backward_gathers():
    cost = CostModel(MODEL_PRESETS["llama-13b"].model_copy(update={"seq_len": 4096}), A800, 8)
    base = Layout(dp=1024, micro_batch_size=1, grad_accum_steps=1)
    z3 = cost.estimate(dataclasses.replace(base, sharding=ShardingFactors.named("zero3", 8, 128)))
    zpp = cost.estimate(dataclasses.replace(base, sharding=ShardingFactors.named("zero++", 8, 128)))
    assert zpp.time.dp_comm.t_p < z3.time.dp_comm.t_p
    secondary_copy = 2 * cost.model.num_params / 8  # bf16 weights over the node's 8 GPUs
    assert zpp.memory.buffers - z3.memory.buffers == pytest.approx(secondary_copy)
    assert zpp.mfu > z3.mfu


def test_full_overlap_hides_only_amsp_broadcast_behind_the_first_forward():
    """AMSP's Table V column: the updated weights' broadcast overlaps the next step's first
    forward at gradient overlap's share; DeepSpeed's bucketed all-gather gains nothing."""
    from orchestrator.costmodel.compare import compare_schemes

    cost = CostModel(MODEL_PRESETS["llama-13b"].model_copy(update={"seq_len": 4096}), A800, 8)
    base = Layout(dp=64, micro_batch_size=1, grad_accum_steps=8)
    rows = {row.scheme: row for row in compare_schemes(cost, base)}
    amsp = rows["amsp"]
    t = amsp.estimate.time
    assert t.dp_comm.t_os1 > 0  # the plan broadcasts updated weights
    hidden = min(t.dp_comm.t_os1, cost.coefficients.overlap_grad * t.compute_s / 8 / 3)
    assert amsp.estimate.step_time_s - amsp.full_overlap.step_time_s == pytest.approx(hidden)
    assert amsp.without_overlap.mfu < amsp.estimate.mfu < amsp.full_overlap.mfu
    for scheme in ("mics", "zero++", "zero1", "zero3"):
        assert rows[scheme].full_overlap.step_time_s == rows[scheme].estimate.step_time_s
