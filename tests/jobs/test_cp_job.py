"""The built-in trainer under context parallelism trains to a single process's loss.

The small dense LLaMA of tests/project/test_modes.py (4 layers, hidden 64, 4 heads, 32-token sequences,
global batch 8) trains 5 steps in float32 on one process, then under 4 ranks in one torchrun
launch (tests/dist_modes.py): cp 2 (beside dp 2) and cp 4 (dp 1) with each comm type
(allgather, a2a Ulysses, p2p ring), and cp 2 with ZeRO-1, FSDP (sharded over dp x cp), TP (with
and without sequence parallelism), a 1F1B pipeline and full recompute; FSDP also over the cp
ranks alone (cp 4, dp 1). Each step's loss must match the single process's within a relative
TOLERANCE of 1e-5.

Why 1e-5: a context-parallel layout computes the same function; only the order of float32 sums
differs: the softmax over keys (a masked SDPA over gathered keys, or blocks merged by
log-sum-exp on the ring), K/V gradients summed over cp ranks, parameter gradients averaged over
dp x cp ranks instead of accumulated micro-batches, the loss as a mean of cp local means. That
is what the other modes see (tests/project/test_modes.py and tests/jobs/test_moe_job.py use the same bound)
and what the attention alone shows (tests/jobs/test_context_parallel.py: at most 6e-7). Measured
here: at most 1.5e-6 (cp 2 with TP 2, Ulysses), under 7e-7 elsewhere. A broken mechanism, in
the test only (a causal mask from local rather than global positions, sequences sharded in
contiguous chunks that the attention takes for head-tail ones, rotary embeddings at local
positions), moves the loss by 3e-3 to 3e-2 within 5 steps, so the check fails on it.

Besides the losses, each layout shows its mechanism: attention sees seq_len / cp tokens a
sequence on every rank, FSDP and ZeRO-1 shard over dp x cp ranks. Also here: the layouts the
job refuses, each with its one-line reason, and the measured TFLOPs (hence MFU) under cp.
"""

from __future__ import annotations

from functools import partial

import pytest
from loss_checks import swapped, worst_relative_difference
import torch

from test_modes import case, run_modes

MODEL = {"num_layers": 4, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
         "seq_len": 32}
GLOBAL_BATCH = 8
STEPS = 5
TOLERANCE = 1e-5  # relative, per step: float32 sums in another order (see the docstring)
COMMS = ("allgather", "a2a", "p2p")
cp_case = partial(case, model=MODEL)


# name: (settings, fraction of the parameters and of the optimizer state rank 0 holds, or None)
WORLD_4 = {
    **{f"cp2_{comm}": (cp_case(2, cp=2, cp_comm_type=comm), (1.0, 1.0)) for comm in COMMS},
    **{f"cp4_{comm}": (cp_case(1, cp=4, cp_comm_type=comm, mbs=2), (1.0, 1.0)) for comm in COMMS},
    "cp2_zero1": (cp_case(2, cp=2, cp_comm_type="allgather", zero_stage=1), (1.0, 0.25)),
    "cp2_fsdp": (cp_case(2, cp=2, cp_comm_type="p2p", zero_stage=3), (0.25, 0.25)),
    "cp4_fsdp_over_cp": (cp_case(1, cp=4, cp_comm_type="allgather", mbs=2,
                                 zero_stage=3), (0.25, 0.25)),
    "cp2_tp2": (cp_case(1, cp=2, cp_comm_type="a2a", tp=2, mbs=2), None),
    "cp2_tp2_sequence_parallel": (cp_case(1, cp=2, cp_comm_type="p2p", tp=2, mbs=2,
                                          sequence_parallel=True), None),
    "cp2_pp2": (cp_case(1, cp=2, cp_comm_type="p2p", pp=2, mbs=2), None),
    "cp2_full_recompute": (cp_case(2, cp=2, cp_comm_type="a2a",
                                   activation_checkpointing="full"), (1.0, 1.0)),
}
BROKEN = {
    "cp2_allgather_local_mask": cp_case(2, cp=2, cp_comm_type="allgather",
                                        patch="test_cp_job:local_mask"),
    "cp2_p2p_local_mask": cp_case(2, cp=2, cp_comm_type="p2p", patch="test_cp_job:local_mask"),
    "cp2_a2a_contiguous_chunks": cp_case(2, cp=2, cp_comm_type="a2a",
                                         patch="test_cp_job:contiguous_chunks"),
    "cp2_allgather_local_rope": cp_case(2, cp=2, cp_comm_type="allgather",
                                        patch="test_cp_job:local_rope"),
}


def local_mask():
    """The causal mask from the queries' local positions: a shard's offset is lost."""
    from jobs import context_parallel

    return swapped(context_parallel, "causal_mask", lambda original: lambda q_pos, k_pos:
                   original(torch.arange(len(q_pos), device=q_pos.device), k_pos))


def contiguous_chunks():
    """Each rank trains on a contiguous 1/cp of each sequence; attention assumes head-tail."""
    from jobs import context_layout

    return swapped(context_layout, "shard_sequence", lambda _: lambda x, cp, rank, dim:
                   x.chunk(cp, dim)[rank])


def local_rope():
    """Rotary embeddings at positions 0 .. seq/cp - 1 rather than the tokens' global ones."""
    from jobs import context_layout

    return swapped(context_layout, "local_positions", lambda _: lambda seq, cp, rank, device:
                   torch.arange(seq // cp, device=device))



@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[list[float], dict]:
    single = run_modes(tmp_path_factory.mktemp("single"), 1, {"single": cp_case(1, cp=1, mbs=2)})
    assert single["single"]["status"] == "ok", single
    cases = {**{name: settings for name, (settings, _) in WORLD_4.items()}, **BROKEN}
    return single["single"]["losses"], run_modes(tmp_path_factory.mktemp("world4"), 4, cases)


def cp_mechanism_failures(name: str, settings: dict, held: tuple | None, got: dict) -> list[str]:
    failures = []
    tokens = MODEL["seq_len"] // settings["cp"]
    if got["attention_sequence_length"] != tokens:
        failures.append(f"{name}: attention saw {got['attention_sequence_length']} tokens a "
                        f"sequence, not seq_len / cp = {tokens}")
    if held is None:
        if got["held"] >= 0.75:
            failures.append(f"{name}: should shard parameters, holds {got['held']:.3f}")
        return failures
    for what, expected in zip(("held", "optimizer_state_fraction"), held):
        if round(got[what], 2) != expected:
            failures.append(f"{name}: {what} {got[what]:.3f}, expected {expected}")
    return failures


@pytest.mark.slow
def test_context_parallel_layouts_match_single_process_loss(runs):
    reference, out = runs
    failures, worst = [], 0.0
    for name, (settings, held) in WORLD_4.items():
        got = out.get(name)
        if got is None or got["status"] != "ok":
            failures.append(f"{name}: {got}")
            continue
        difference = worst_relative_difference(got["losses"], reference, STEPS)
        print(f"{name}: worst relative loss difference {difference:.2e}")
        worst = max(worst, difference)
        if difference > TOLERANCE:
            failures.append(f"{name}: losses {got['losses']} != single-process {reference}")
        failures += cp_mechanism_failures(name, settings, held, got)
    print(f"worst relative loss difference over {len(WORLD_4)} layouts: {worst:.2e}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_mask_or_chunk_order_fails_the_loss_check(runs, name):
    reference, out = runs
    got = out[name]
    assert got["status"] == "ok", got  # it trains, to other losses
    difference = worst_relative_difference(got["losses"], reference, STEPS)
    print(f"{name}: worst relative loss difference {difference:.2e}")
    assert difference > 100 * TOLERANCE


def refusal(world: int | None = None, **settings) -> str:
    from jobs.config import parse_config
    from jobs.trainer import Infeasible, check_feasible

    config = parse_config([])
    config.model.__dict__.update(MODEL)
    model = settings.pop("model", {})
    config.model.__dict__.update(model)
    config.__dict__.update(settings)
    size = world or config.tp * config.pp * config.cp * config.dp
    with pytest.raises(Infeasible) as refused:
        check_feasible(config, size)
    reason = str(refused.value)
    assert "\n" not in reason
    return reason


def test_unrunnable_context_parallel_layouts_are_refused_with_a_reason():
    assert "cp(2) * dp(2) != WORLD_SIZE(2)" in refusal(world=2, dp=2, cp=2)
    assert "2 x cp must divide seq_len(36)" in refusal(cp=4, model={"seq_len": 36})
    assert "cp(4) must divide the 2 heads of a tp(2) rank" in refusal(
        cp=4, tp=2, cp_comm_type="a2a")
    assert "compile with cp(2)" in refusal(cp=2, compile=True)
    assert "sequence_parallel needs tp(4) dividing" in refusal(
        cp=4, tp=4, sequence_parallel=True, model={"seq_len": 40})
    assert "cp_comm_type('ring')" in refusal(cp=2, cp_comm_type="ring")
    assert "cp(2) with MoE layers" in refusal(
        cp=2, dp=2, ep=2, etp=1, model={"num_experts": 4, "moe_ffn_hidden": 64})


def test_sharded_modes_take_the_cp_ranks_into_their_shard_group():
    """zero_stage 1-3 shard over dp x cp ranks, also with dp 1 (over cp alone); the mesh is
    (pp, replicate, shard, cp, tp)."""
    from jobs.config import JobConfig
    from jobs.layout import data_parallel_plan, mesh_shape

    for stage, kind in ((0, "ddp"), (1, "zero1"), (2, "fsdp"), (3, "fsdp")):
        config = JobConfig(dp=1, cp=4, zero_stage=stage)
        plan = data_parallel_plan(config)
        assert plan.kind == kind
        assert mesh_shape(config, plan) == (1, 1, 1, 4, 1)
    config = JobConfig(dp=2, cp=2, tp=2, zero_stage=3)
    assert mesh_shape(config, data_parallel_plan(config)) == (1, 1, 2, 2, 2)
    assert data_parallel_plan(JobConfig(dp=1, cp=1, zero_stage=3)).kind == "ddp"


def test_model_hooks_default_to_the_plain_model():
    """With the attention hook set to plain causal attention and the positions 0..s-1, the
    model computes what it computes without them."""
    from jobs.context_parallel import causal_attention
    from jobs.model import Attention, ModelArgs, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelArgs(**MODEL))
    tokens = torch.randint(0, MODEL["vocab_size"], (2, MODEL["seq_len"]))
    plain = model(tokens)
    for layer in model.modules():
        if isinstance(layer, Attention):
            layer.attention_fn = causal_attention
    model.rope_positions = torch.arange(MODEL["seq_len"])
    torch.testing.assert_close(model(tokens), plain, rtol=1e-5, atol=1e-6)


def test_measured_mfu_counts_whole_sequences_over_the_whole_world():
    """Under cp the global batch is still micro-batch x accumulation x dp whole sequences, and
    the FLOPs of their attention (over seq_len keys) split over tp x pp x cp x dp ranks."""
    from jobs.config import JobConfig
    from jobs.model import ModelArgs
    from jobs.train import summarize
    from orchestrator.result import model_flops_per_iteration

    args = ModelArgs(**MODEL)
    config = JobConfig(model=args, dp=1, cp=4, micro_batch_size=2, grad_accum_steps=4,
                       peak_tflops=1.0)
    result = summarize(config, [2.0], [5.0], 0.0, world=4)
    tokens = GLOBAL_BATCH * MODEL["seq_len"]
    assert result.tokens_per_s == tokens / 2.0
    assert result.tflops_per_gpu * 1e12 == pytest.approx(
        model_flops_per_iteration(args, tokens) / 2.0 / 4)
    assert result.mfu == result.tflops_per_gpu
