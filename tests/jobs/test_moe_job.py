"""The built-in trainer's mixture of experts trains to a single process's loss under expert
parallelism.

A small MoE LLaMA (4 layers, the first dense, then 8 experts, top-2, with a shared expert) trains
5 steps in float32 on one process, then under 4 ranks in one torchrun launch
(tests/dist_modes.py): ep 1, 2 and 4 with DDP, ZeRO-1 and FSDP; ep 2 and 4 with tensor
parallelism (ep 2 also with sequence parallelism and with FSDP); ep 2 with a pipeline (1F1B,
interleaved, and with FSDP), with HSDP and with full recompute. Each step's loss must match the
single process's within a relative TOLERANCE of 1e-5.

Why 1e-5: routing is dropless and has no auxiliary loss, so a token's result does not depend on
where its experts run, and the layouts compute the same function; only the order of float32
sums differs (gradients reduced over other groups, matrix products over other row counts),
which is what the dense modes see too (tests/project/test_modes.py uses the same bound). Measured
here: at most about 5e-7. A broken all-to-all, in the test only (results combined into the
wrong rows, or tokens dispatched without their gradient back), moves the loss by more than
1e-3 within 5 steps, so the check fails on it.

Also here: the layouts the job refuses, each with its one-line reason, and the measured
TFLOPs (hence MFU) counting activated parameters only.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
from loss_checks import swapped, worst_relative_difference
import torch

from test_modes import case, run_modes

MODEL = {"num_layers": 4, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
         "seq_len": 32, "num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 64,
         "shared_expert_ffn_hidden": 64, "first_dense_layers": 1}
GLOBAL_BATCH = 8
STEPS = 5
TOLERANCE = 1e-5  # relative, per step: float32 sums in another order (see the docstring)
moe_case = partial(case, model=MODEL, etp=1)  # whole experts on each expert-parallel rank


HSDP = {"s0p": 2, "s1p": 1, "s0g": 2, "s1g": 1, "s0os": 2, "s1os": 1}
WORLD_4 = {
    **{f"ep{ep}_{mode}": moe_case(4, ep=ep, zero_stage=zero)
       for ep in (1, 2, 4) for mode, zero in (("ddp", 0), ("zero1", 1), ("fsdp", 3))},
    "ep2_tp2": moe_case(2, ep=2, tp=2, mbs=2),
    "ep2_tp2_sequence_parallel": moe_case(2, ep=2, tp=2, mbs=2, sequence_parallel=True),
    "ep2_tp2_fsdp": moe_case(2, ep=2, tp=2, mbs=2, zero_stage=3),
    "ep4_tp2": moe_case(2, ep=4, tp=2, mbs=2),
    "ep2_pp2": moe_case(2, ep=2, pp=2),
    "ep2_pp2_interleaved": moe_case(2, ep=2, pp=2, pp_schedule="interleaved", virtual_stages=2),
    "ep2_pp2_fsdp": moe_case(2, ep=2, pp=2, zero_stage=3),
    "ep2_hsdp": moe_case(4, ep=2, **HSDP),
    "ep2_full_recompute": moe_case(4, ep=2, activation_checkpointing="full"),
}
BROKEN = {
    "ep2_misrouted_combine": moe_case(4, ep=2, patch="test_moe_job:misrouted_combine"),
    "ep2_dispatch_without_gradient": moe_case(4, ep=2,
                                              patch="test_moe_job:dispatch_without_gradient"),
}


def misrouted_combine():
    """The combine all-to-all puts each result one row off: a token gets its neighbour's."""
    from jobs import expert_parallel

    return swapped(expert_parallel, "combine", lambda original: lambda *args:
                   torch.roll(original(*args), 1, dims=0))


def dispatch_without_gradient():
    """The dispatch all-to-all sends the tokens but no gradient back to their ranks."""
    from jobs import expert_parallel

    return swapped(expert_parallel, "dispatch", lambda original: lambda routed, *args:
                   original(routed.detach(), *args))



def expected_held(settings: dict) -> float | None:
    """The fraction of the model's parameters rank 0 holds with dp ranks only: every
    non-expert parameter and 1/ep of the experts (DDP, ZeRO-1), or a 1/dp shard of all
    (FSDP: non-experts over dp, experts over ep x expert-dp = dp ranks)."""
    if settings["tp"] > 1 or settings["pp"] > 1 or "s0p" in settings:
        return None
    from jobs.model import ModelArgs, Transformer, num_params

    with torch.device("meta"):
        model = Transformer(ModelArgs(**MODEL))
    whole = num_params(model)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    if settings.get("zero_stage") == 3:
        return 1 / settings["dp"]
    return (whole - experts + experts / settings["ep"]) / whole


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[list[float], dict]:
    single = run_modes(tmp_path_factory.mktemp("single"), 1, {"single": moe_case(1, mbs=2)})
    assert single["single"]["status"] == "ok", single
    out = run_modes(tmp_path_factory.mktemp("world4"), 4, {**WORLD_4, **BROKEN})
    return single["single"]["losses"], out


@pytest.mark.slow
def test_expert_parallel_layouts_match_single_process_loss(runs):
    reference, out = runs
    failures, worst = [], 0.0
    for name, settings in WORLD_4.items():
        got = out.get(name)
        if got is None or got["status"] != "ok":
            failures.append(f"{name}: {got}")
            continue
        difference = worst_relative_difference(got["losses"], reference, STEPS)
        print(f"{name}: worst relative loss difference {difference:.2e}, holds {got['held']:.4f}")
        worst = max(worst, difference)
        if difference > TOLERANCE:
            failures.append(f"{name}: losses {got['losses']} != single-process {reference}")
        held = expected_held(settings)
        if held is not None and not math.isclose(got["held"], held, rel_tol=1e-6):
            failures.append(f"{name}: holds {got['held']:.4f} of the parameters, not {held:.4f}")
    print(f"worst relative loss difference over {len(WORLD_4)} layouts: {worst:.2e}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_all_to_all_fails_the_loss_check(runs, name):
    reference, out = runs
    got = out[name]
    assert got["status"] == "ok", got  # it trains, to other losses
    difference = worst_relative_difference(got["losses"], reference, STEPS)
    print(f"{name}: worst relative loss difference {difference:.2e}")
    assert difference > 100 * TOLERANCE


def test_unimplemented_expert_layouts_are_refused_with_a_reason():
    from jobs.config import parse_config
    from jobs.trainer import Infeasible, check_experts_feasible, check_feasible

    def reason(**settings) -> str:
        config = parse_config([])
        config.model.__dict__.update(MODEL)
        config.__dict__.update(settings)
        with pytest.raises(Infeasible) as refused:
            check_feasible(config, config.tp * config.pp * config.dp)
        return str(refused.value)

    assert "etp(2, tp's when unset)" in reason(tp=2, dp=2, ep=2)
    assert "etp(2)" in reason(dp=4, ep=2, etp=2)
    assert "ep(3) must divide num_experts(8)" in reason(dp=3, ep=3, etp=1)
    assert "tp(2) x dp(1)" in reason(tp=2, dp=1, ep=4, etp=1)
    config = parse_config([])
    config.model.__dict__.update(MODEL)
    config.__dict__.update(dp=2, cp=2, ep=2, etp=1)
    with pytest.raises(Infeasible, match=r"cp\(2\) with MoE layers"):
        check_experts_feasible(config)  # whatever the world-size rule with cp
    config = parse_config([])
    config.__dict__.update(dp=2, ep=2)
    with pytest.raises(Infeasible, match="needs a model with MoE layers"):
        check_feasible(config, 2)


def test_measured_mfu_counts_activated_parameters():
    """The trainer's TFLOPs (hence MFU) count the experts a token runs, not all of them: 6
    FLOPs per token per activated matrix weight (the router aside, as Megatron-LM counts),
    plus the attention scores, on the weights of the model the job really builds."""
    from jobs.config import JobConfig
    from jobs.model import ModelArgs, Transformer
    from jobs.train import summarize

    args = ModelArgs(**MODEL)
    config = JobConfig(model=args, micro_batch_size=1, grad_accum_steps=GLOBAL_BATCH)
    result = summarize(config, [1.0], [5.0], 0.0, world=1)
    with torch.device("meta"):
        model = Transformer(args)
    weights = {n: p.numel() for n, p in model.named_parameters() if p.dim() == 2}
    dense = sum(n for name, n in weights.items()
                if "tok_embeddings" not in name and "router" not in name and ".experts." not in name)
    one_expert = sum(n for name, n in weights.items() if ".layers.1.feed_forward.experts.mlps.0."
                     in f".{name}")
    moe_layers = args.num_layers - args.first_dense_layers
    activated = dense + moe_layers * args.experts_per_token * one_expert
    scores = 3 * args.num_layers * 2 * 2 * args.seq_len * args.hidden
    tokens = GLOBAL_BATCH * args.seq_len
    assert result.tflops_per_gpu * 1e12 == pytest.approx(tokens * (6 * activated + scores))
    assert activated < dense + moe_layers * args.num_experts * one_expert  # fewer than all
