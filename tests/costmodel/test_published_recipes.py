"""The recompute of Megatron-Bridge's and NeMo 24.07's published performance runs, read from
their launch code (orchestrator/costmodel/published_recipes.py), and how a module list is
priced."""

from __future__ import annotations

import csv
import sys

import pytest
from conftest import ROOT

from orchestrator.costmodel.published_names import NotPriced
from orchestrator.costmodel.published_recipes import (
    SETTINGS,
    TABLES,
    priced_recompute,
    recompute_from_launch_code,
)
from orchestrator.costmodel.published_rows import PricedRow, Unpriced, price_row

sys.path.insert(0, str(ROOT / "benchmarks"))
import measured_corpus  # noqa: E402

BRIDGE = "nemo_megatron_bridge_perf_summary.csv"


def _bridge_rows():
    return {r.number: r.values for r in measured_corpus.rows() if r.file == BRIDGE}


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_every_run_read_from_code_is_a_published_row(table):
    with open(table, newline="") as f:
        runs = list(csv.DictReader(f))
    key = [c for c in runs[0] if c not in SETTINGS]
    published = {tuple(r.values.get(k, "") for k in key) for r in measured_corpus.rows()}
    assert all(tuple(run[k] for k in key) in published for run in runs)
    assert all(run["launch_code"] and run["recipe"] for run in runs)


def test_nemo_2407_gpt3_175b_on_512_gpus_ran_without_recompute():
    # NeMo-Framework-Launcher's launcher_scripts/conf/training/gpt3/175b_mlperf.yaml (the only
    # config of the published TP4 PP8 VP6 micro-batch 2 layout on 64 nodes):
    # activations_checkpoint_granularity null.
    values = next(r.values for r in measured_corpus.rows()
                  if r.file == "nemo_24.07_perf_summary.csv" and r.number == 4)
    assert (values["model"], values["gpus"]) == ("GPT3-175B", "512")
    mode, said = recompute_from_launch_code(values)
    assert mode == "none" and "NeMo-Framework-Launcher" in said[0]


def test_qwen3_runs_recompute_nothing_as_the_qwen3_perf_scripts_set_it():
    # scripts/performance/configs/qwen/qwen3_llm_pretrain.py `set_qwen3_common_configs`:
    # recompute_granularity = None, over the 30B recipe's full recompute of every layer.
    row = _bridge_rows()[7]
    assert (row["model"], row["gpu_type"], row["container"]) == ("Qwen3_30B_a3B", "GB300",
                                                                "26.08")
    mode, said = recompute_from_launch_code(row)
    assert mode == "none" and "Megatron-Bridge v0.6.0" in said[0]
    assert "nothing recomputed" in said[0]
    priced = price_row(row)
    assert isinstance(priced, PricedRow) and priced.config.activation_checkpointing == "none"
    assert "recompute" not in priced.unpublished_memory_settings


def test_a_run_that_offloads_activations_is_not_priced():
    offloading = [values for values in _bridge_rows().values()
                  if values["model"] == "LLAMA3_70B" and values["gpu_type"] == "GB200"
                  and "FSDP=64" in values["zero_or_fsdp"]
                  and values["precision"].startswith("FP8")]
    assert offloading
    for values in offloading:
        with pytest.raises(NotPriced, match="offload"):
            recompute_from_launch_code(values)
        assert isinstance(price_row(values), Unpriced)


def test_a_row_whose_layout_no_preset_sets_keeps_the_least_recompute_that_fits():
    # Row 167: Llama 3 70B on GB300, MXFP8, 26.02.01 published at pp 4 without interleaving and
    # micro-batch 2; every preset of that release interleaves 5 stages at micro-batch 1.
    row = _bridge_rows()[167]
    assert recompute_from_launch_code(row) is None
    priced = price_row(row)
    assert any("least the model says fits" in a for a in priced.assumptions)


@pytest.mark.parametrize("modules,mode", [
    ((), "none"), (("mla_up_proj",), "none"), (("layernorm", "moe_act"), "none"),
    (("core_attn",), "selective"), (("moe", "layernorm", "core_attn", "moe_act"), "full"),
    (("mla_up_proj", "mlp"), "full")])
def test_module_lists_are_priced_by_what_their_replay_costs(modules, mode):
    assert priced_recompute(frozenset(modules))[0] == mode


def test_a_module_the_model_does_not_know_is_not_priced():
    with pytest.raises(NotPriced, match="mhc"):
        priced_recompute(frozenset({"moe_act", "mhc"}))
