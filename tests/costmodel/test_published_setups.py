"""The cost model and the AMSP planner against published results (shared/research notes).

Every figure here comes from the example specs through the CLI, so the specs users run are
the ones checked, and carries its id (orchestrator/costmodel/constants_provenance.py): a
check calls `check(id)`, a figure some constant was fitted to `fit(id)` (test_costmodel_papers.py).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from builders import cli_json
from conftest import EXAMPLES
from test_costmodel_papers import amsp_recomputing_every_layer, published

from orchestrator.costmodel.constants_provenance import check, fit
from orchestrator.space import ShardingFactors
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for


def factors(plan: dict) -> tuple[int, ...]:
    return tuple(plan["plan"][k] for k in ("s0p", "s1p", "s0g", "s1g", "s0os", "s1os"))


@pytest.mark.parametrize("figure_id,model,paper", [
    published("amsp-table-iv-7b-plan", "7b", (1, 1, 1, 1, 8, 1)),
    published("amsp-table-iv-13b-plan", "13b", (4, 1, 4, 1, 8, 1))])
def test_amsp_table_iv_plans_as_fitted(cli, figure_id, model, paper):
    """AMSP Table IV, 1,024 A800s: the planner returns the paper's plan; a fit, as the chunk
    cost and the weight-gather overlap were chosen against these plans."""
    fit(figure_id)
    plan = cli_json(cli, "plan", str(EXAMPLES / f"amsp-llama-{model}.yaml"))
    assert factors(plan) == paper and plan["best"]["fits"]
    assert 0 < plan["mfu"] < 1 and plan["tokens_per_s"] > 0


def test_amsp_table_iv_30b_plan_is_a_tie_with_the_papers(cli):
    """30B: the model returns (8,1,8,1,8,2) where the paper ran (8,1,8,1,8,4).

    Why they differ: with s_p = 8 the optimizer-state broadcast T_os1 moves 2Ψ/s_p bytes through
    the network whatever s1os is (s_os/s_p broadcasts of 2Ψ/s_os each), so the model separates
    s1os = 2 from 4 only by ring latency (0.17 ms in a 7.5 s step); the tie goes to the plan
    that shards less. AMSP's profiled bandwidths
    (per message size and mesh) separate them. Both fit in memory, and the paper's plan is within
    2% of the model's optimum in predicted step time and in exposed communication.
    """
    check("amsp-table-iv-30b-plan")
    plan = cli_json(cli, "plan", str(EXAMPLES / "amsp-llama-30b.yaml"))
    assert factors(plan) == (8, 1, 8, 1, 8, 2) and plan["best"]["fits"]
    spec = load_spec(EXAMPLES / "amsp-llama-30b.yaml")
    cost = cost_model_for(spec)
    (base,) = {dataclasses.replace(c, sharding=None) for c in spec.search_space().candidates()}
    paper = cost.estimate(dataclasses.replace(base, sharding=ShardingFactors(8, 1, 8, 1, 8, 4)))
    assert paper.fits
    assert paper.step_time_s <= plan["best"]["step_time_s"] * 1.02
    assert paper.time.dp_exposed_s <= plan["best"]["time"]["dp_exposed_s"] * 1.02 + 1e-9


@pytest.mark.parametrize("figure_id,model,mics_group", [
    published("amsp-7b-1024-ordering", "7b", 8), published("amsp-13b-1024-ordering", "13b", 8),
    published("amsp-30b-1024-ordering", "30b", 16)])
def test_amsp_beats_mics_beats_zero3_at_1024_gpus(cli, figure_id, model, mics_group):
    """AMSP §VI-B at 1,024 GPUs: MFU of the AMSP plan > MiCS (Table IV groups) > ZeRO-3; 30B's
    plan with every layer recomputed (the paper does not say how many)."""
    (check if model == "30b" else fit)(figure_id)
    plan = cli_json(cli, "plan", str(EXAMPLES / f"amsp-llama-{model}.yaml"))
    amsp_mfu = amsp_recomputing_every_layer(model)["mfu"] if model == "30b" else plan["mfu"]
    spec = load_spec(EXAMPLES / f"amsp-llama-{model}.yaml")
    cost = cost_model_for(spec)
    (base,) = {dataclasses.replace(c, sharding=None) for c in spec.search_space().candidates()}
    baselines = {
        scheme: cost.estimate(dataclasses.replace(
            base, sharding=ShardingFactors.named(scheme, 8, 128, group=mics_group)))
        for scheme in ("mics", "zero3")
    }
    assert all(e.fits for e in baselines.values())
    assert amsp_mfu > baselines["mics"].mfu > baselines["zero3"].mfu


def test_megatron_1t_on_3072_a100s_as_the_gemm_constants_were_fitted(cli):
    """Narayanan et al. 2021, Table 1: 163 TFLOPS/GPU = 52% of peak, counted with recompute
    FLOPs (their convention; ParaTune's `hfu`). Within ±5 points: a fit, not a check, as the
    GEMM constants were chosen so that it comes out."""
    fit("megatron-1t-hfu")
    code, out, err = cli("estimate", str(EXAMPLES / "megatron-1t.yaml"), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["fits"] and result["world_size"] == 3072
    assert result["hfu"] == pytest.approx(0.52, abs=0.05)
    assert result["mfu"] < result["hfu"]  # full recompute: model FLOPs are 3/4 of hardware FLOPs


@pytest.mark.parametrize("figure_id,name,published_mfu", [
    published("frontier-175b-mfu", "frontier-175b.yaml", 0.361),
    published("frontier-1t-mfu", "frontier-1t.yaml", 0.320)])
def test_frontier_best_configuration_percent_of_peak(cli, figure_id, name, published_mfu):
    """Dash et al. (arXiv 2312.12705): the best configuration the model finds is within
    ±5 points of the published % of the BF16 peak (175B on 1,024 GCDs: 36.14%; 1T on 3,072:
    31.96%)."""
    check(figure_id)
    plan = cli_json(cli, "plan", str(EXAMPLES / name))
    assert plan["best"]["fits"]
    assert plan["mfu"] == pytest.approx(published_mfu, abs=0.05)


def test_frontier_175b_weak_scaling_128_to_1024_gcds(cli):
    """Frontier paper: ~100% weak scaling for 175B. The best layout on 128 GCDs (16 nodes),
    replicated 8 times more by data parallelism on 1,024 GCDs with the per-replica batch kept, keeps
    >= 95% of its per-GCD throughput."""
    check("frontier-175b-weak-scaling")
    small = cli_json(cli, "plan", str(EXAMPLES / "frontier-175b.yaml"), "--set", "scale.nodes=16",
                     "--set", "scale.global_batch_size=192")
    config = small["best"]["config"]
    assert small["world_size"] == 128 and small["best"]["fits"]
    pinned = [f"--set=space.{k}=[{str(config[k]).lower()}]" for k in
              ("tp", "pp", "micro_batch_size", "zero_stage", "activation_checkpointing")]
    large = cli_json(cli, "plan", str(EXAMPLES / "frontier-175b.yaml"), "--set",
                     "scale.global_batch_size=1536", *pinned)
    assert large["world_size"] == 1024 and large["best"]["fits"]
    assert large["best"]["config"]["dp"] == 8 * config["dp"]
    assert large["best"]["config"]["grad_accum_steps"] == config["grad_accum_steps"]
    efficiency = large["best"]["tokens_per_s_per_gpu"] / small["best"]["tokens_per_s_per_gpu"]
    assert 0.95 <= efficiency <= 1.0


def test_frontier_1t_weak_scaling_768_to_3072_gcds(cli):
    """Frontier paper: ~100% weak scaling for 1T. docs/costmodel.md's layout (TP 8, PP 32,
    micro-batch 1, full recompute, ZeRO-1) at 96 and 384 nodes with the batch per node kept
    keeps >= 95% of its per-GCD throughput."""
    check("frontier-1t-weak-scaling")
    pinned = [f"--set=space.{k}" for k in ("tp=[8]", "pp=[32]", "micro_batch_size=[1]",
                                            "activation_checkpointing=[full]", "zero_stage=[1]")]
    small, large = cli_json(cli, "plan", str(EXAMPLES / "frontier-1t.yaml"), "--nodes",
                            "96,384", "--weak", *pinned)["rows"]
    assert "config" in small and "config" in large  # a layout that fits at both scales
    efficiency = large["tokens_per_s_per_gpu"] / small["tokens_per_s_per_gpu"]
    assert 0.95 <= efficiency <= 1.0
