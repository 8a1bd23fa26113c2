"""FP8, offload, overlap and buckets in the cost model: what each changes, torchtitan's published
Float8 gain (docs/costmodel.md, "FP8"), and the planner choosing offload only when it must."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from test_costmodel_papers import published, run_json

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.constants_provenance import check
from orchestrator.costmodel.ranking import rank_by_throughput
from orchestrator.trainers.registry import adapter
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.result import TrialResult
from orchestrator.scheduling.live_cost_model import LiveCostModel
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates

H100 = CLUSTER_PRESETS["h100-80g"]
A100 = CLUSTER_PRESETS["a100-80g"]
LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"]
# torchtitan's H100 benchmark (examples/torchtitan-float8.yaml): 6,667 tokens/s/GPU in bf16,
# 8,532 with Float8. ZeRO-Offload's 10B GPT-2 on one V100 (examples/zero-offload-10b.yaml):
# 25.7-26.8 s an iteration at batch 10 (DeepSpeed's tutorial log), ~41 TFLOPS at batch 512
# (the paper's Figure 8, recompute counted: 8 x parameters x tokens).
PUBLISHED_FLOAT8_GAIN = 8532 / 6667
PUBLISHED_OFFLOAD_ITERATION_S = (25.7 + 26.8) / 2
PUBLISHED_OFFLOAD_TFLOPS = 41.0


def estimate_example(example: str, *overrides: str) -> dict:
    return run_json("estimate", str(EXAMPLES / example),
                    *[arg for o in overrides for arg in ("--set", o)])


@pytest.mark.parametrize("figure_id", [published("torchtitan-float8-gain")])
def test_torchtitan_float8_gain_on_llama3_8b_is_within_10_percent(figure_id):
    """On the published layout (FSDP, local batch 2, selective recompute), which must fit:
    the model's memory says it does not (120 GB of 96), so this is a documented miss."""
    check(figure_id)
    runs = {p: estimate_example("torchtitan-float8.yaml", f"space.precision=[{p}]")
            for p in ("bf16", "fp8-tensorwise")}
    assert all(run["fits"] for run in runs.values())
    gain = runs["fp8-tensorwise"]["tokens_per_s_per_gpu"] / runs["bf16"]["tokens_per_s_per_gpu"]
    assert gain == pytest.approx(PUBLISHED_FLOAT8_GAIN, rel=0.10)
    assert gain > 1.1  # FP8 is worth choosing here, as published


@pytest.mark.parametrize("figure_id", [published("zero-offload-10b-iteration")])
def test_zero_offload_10b_iteration_on_one_v100_is_within_15_percent(figure_id):
    """On the tutorial's layout (micro-batch 10, full recompute), which must fit: the model
    puts it at 33.9 GB of 32, as the tutorial's activation checkpoints on the host
    (`cpu_checkpointing`) are not a knob, so this is a documented miss."""
    check(figure_id)
    iteration = estimate_example("zero-offload-10b.yaml")
    assert iteration["fits"]
    assert iteration["step_time_s"] == pytest.approx(PUBLISHED_OFFLOAD_ITERATION_S, rel=0.15)


@pytest.mark.parametrize("figure_id", [published("zero-offload-10b-tflops")])
def test_zero_offload_10b_tflops_at_batch_510_is_within_15_percent(figure_id):
    check(figure_id)
    big_batch = estimate_example("zero-offload-10b.yaml", "scale.global_batch_size=510")
    assert big_batch["fits"]
    assert big_batch["hfu"] * 125 == pytest.approx(PUBLISHED_OFFLOAD_TFLOPS, rel=0.15)


def test_the_zero_offload_iteration_prices_its_offload():
    iteration = estimate_example("zero-offload-10b.yaml")
    assert iteration["time"]["offload_s"] > 0.1 * iteration["step_time_s"]


def test_fp8_casts_cost_time_so_the_gain_is_below_the_peak_ratio():
    cost = CostModel(LLAMA_8B, H100, 8, runtime=adapter("torchtitan").runtime)
    base = dict(dp=8, zero_stage=3, micro_batch_size=2, activation_checkpointing="selective")
    times = {p: cost.estimate(Layout(**base, precision=p)).time.compute_s
             for p in ("bf16", "fp8-tensorwise", "fp8-delayed")}
    assert times["fp8-delayed"] < times["fp8-tensorwise"] < times["bf16"]
    assert times["bf16"] / times["fp8-delayed"] < H100.fp8_peak_tflops / H100.peak_tflops


def test_fp8_on_a_cluster_without_fp8_cores_is_infeasible_with_the_reason():
    cost = CostModel(LLAMA_8B, CLUSTER_PRESETS["cpu-local"], 2)
    config = Layout(dp=2, precision="fp8-tensorwise")
    assert cost.estimate(config).fits is False and not cost.fits(config)
    result = LiveCostModel(cost, []).infeasible(config)
    assert isinstance(result, TrialResult) and result.status == "infeasible"
    assert "no FP8 tensor cores" in result.error and "cpu-local" in result.error
    assert CostModel(LLAMA_8B, A100, 8).estimate(
        Layout(dp=8, precision="mxfp8")).unsupported


def offload_spec(model: str, gpus: int, *extra: str):
    return load_spec(EXAMPLES / "quickstart.yaml", [
        f"model={model}", "cluster=a100-80g", "scale.nodes=1", f"scale.gpus_per_node={gpus}",
        f"scale.global_batch_size={8 * gpus}", "space.tp=[1]", "space.pp=[1]",
        "space.zero_stage=[0, 1, 3]", "space.micro_batch_size=[1, 2]",
        "space.activation_checkpointing=[full]", "space.offload=[none, optimizer]", *extra])


def ranked(spec):
    cost = cost_model_for(spec)
    return cost, rank_by_throughput(cost, fitted_candidates(spec, cost), top_k=100).top


def test_a_model_that_fits_only_with_offload_is_planned_with_it():
    spec = offload_spec("llama-13b", 1)  # 13B on one A100: 16 bytes/param of states
    cost, plan = ranked(spec)
    assert plan and all(e.config.offload == "optimizer" for e in plan)
    assert not any(cost.fits(c) for c in fitted_candidates(spec, cost) if c.offload == "none")
    best = plan[0]
    assert best.memory.optimizer == 0 and best.memory.host > 150e9
    assert best.time.offload_s > 0


def test_the_planner_keeps_offload_off_where_layouts_fit_without_it():
    spec = offload_spec("llama-7b", 8)  # ZeRO over 8 GPUs fits without the host
    _, plan = ranked(spec)
    assert plan[0].config.offload == "none"
    with_offload = [e for e in plan if e.config.offload != "none"]
    twin = {e.config.key(): e for e in plan}
    for e in with_offload:  # each is slower than the same layout kept on the device
        same = twin.get(e.config.key().replace("-offopt", ""))
        assert same is None or same.tokens_per_s > e.tokens_per_s


def test_offloaded_states_must_fit_the_hosts_memory():
    small_host = A100.model_copy(update={"host_memory_gb": 64.0})
    model = MODEL_PRESETS["llama-13b"]
    config = Layout(dp=1, offload="optimizer", activation_checkpointing="full")
    assert CostModel(model, A100, 1).fits(config)
    assert not CostModel(model, small_host, 1).fits(config)
    result = LiveCostModel(CostModel(model, small_host, 1), []).infeasible(config)
    assert "host memory" in result.error


def test_overlap_comm_hides_deepspeed_gradient_reduction_and_buckets_add_latency():
    cost = CostModel(MODEL_PRESETS["llama-7b"], A100, 8, runtime=adapter("deepspeed").runtime)
    base = dict(dp=32, zero_stage=1, grad_accum_steps=1, activation_checkpointing="full")
    step = {v: cost.estimate(Layout(**base, overlap_comm=v)).step_time_s
            for v in (None, False, True)}
    assert step[True] < step[False] == pytest.approx(step[None])
    small, large = (cost.estimate(Layout(**base, bucket_size=size)).time.dp_comm.total
                    for size in (1_000_000, 500_000_000))
    assert small > large


def test_offload_on_a_cluster_without_a_host_link_is_infeasible_with_the_reason():
    bare = A100.model_copy(update={"host_link_gbps": 0.0})
    config = Layout(dp=1, offload="optimizer", activation_checkpointing="full")
    cost = CostModel(MODEL_PRESETS["llama-7b"], bare, 1)
    assert not cost.estimate(config).fits and not cost.fits(config)
    assert "host_link_gbps" in LiveCostModel(cost, []).infeasible(config).error
