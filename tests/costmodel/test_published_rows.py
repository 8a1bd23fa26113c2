"""A published measurement (benchmarks/measured/) becomes the cost model's inputs as its CSV
text says, or one line saying why it cannot (orchestrator/costmodel/published_rows.py).
Expected values are read off the CSV rows by hand."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from conftest import ROOT

from orchestrator.costmodel.published_names import cluster_of
from orchestrator.costmodel.published_rows import PricedRow, Unpriced, price_row

sys.path.insert(0, str(ROOT / "benchmarks"))

import measured_corpus  # noqa: E402

ROWS = {(r.file, r.number): r.values for r in measured_corpus.rows()}


def published_row(file: str, number: int) -> PricedRow:
    row = price_row(ROWS[(file, number)])
    assert isinstance(row, PricedRow), row
    return row


def test_a_dlperf_row_is_its_published_layout_on_the_v100_cluster():
    # Row 1: GPT 498M (16 x 1536, 16 heads, seq 2048) on 1 V100-SXM2-16GB, tp 1 pp 1 dp 1,
    # micro-batch 2 of global 2, full recompute, Megatron-LM of 2020: 464.12 ms.
    row = published_row("dlperf_gpt_v100.csv", 1)
    c = row.config
    assert (c.tp, c.pp, c.dp, c.micro_batch_size, c.grad_accum_steps) == (1, 1, 1, 2, 1)
    assert c.activation_checkpointing == "full" and c.zero_stage == 0
    assert row.cost.cluster.name == "v100-16g" and row.cost.cluster.memory_gb == 16
    m = row.cost.model
    assert (m.num_layers, m.hidden, m.num_heads, m.seq_len, m.vocab_size) == (16, 1536, 16, 2048,
                                                                              51200)
    assert row.measured_step_s == pytest.approx(0.46412)
    assert row.measured_memory_gb is None  # Megatron's row publishes no memory
    assert any("fp16" in a for a in row.assumptions)


def test_a_v100_row_in_fp16_is_named_fp16_and_priced_as_the_16_bit_layout():
    # DLPerf row 1 publishes fp16 (a V100 has no BF16 cores): its landscape says fp16, and
    # the model prices it as its one 16-bit layout (precision knob "bf16": the dense 16-bit
    # peak, 2-byte values), so the same row published as bf16 predicts the same step.
    row = published_row("dlperf_gpt_v100.csv", 1)
    assert "v100-16g | fp16 |" in row.landscape and "bf16" not in row.landscape
    assert row.config.precision == "bf16"
    as_bf16 = price_row({**ROWS[("dlperf_gpt_v100.csv", 1)], "precision": "bf16"})
    assert as_bf16.landscape == row.landscape.replace("| fp16 |", "| bf16 |")
    assert (as_bf16.cost.estimate(as_bf16.config).step_time_s
            == row.cost.estimate(row.config).step_time_s)


def test_a_dlperf_data_parallel_row_and_its_memory():
    # Row 7: the same model data-parallel over 32 GPUs (4 nodes of 8), 2 a GPU, global 64:
    # 683.51 ms. Row 8 (OneFlow) reports 12,208 MiB.
    row = published_row("dlperf_gpt_v100.csv", 7)
    assert (row.config.dp, row.config.tp, row.config.global_batch_size()) == (32, 1, 64)
    assert row.cost.gpus_per_node == 8
    assert row.measured_step_s == pytest.approx(0.68351)
    oneflow = published_row("dlperf_gpt_v100.csv", 8)
    assert oneflow.measured_memory_gb == pytest.approx(12208 * 1.048576 / 1000)
    assert oneflow.landscape != row.landscape  # another framework, another landscape
    assert oneflow.landscape.replace("OneFlow", "") != oneflow.series


def test_tokens_per_gpu_become_a_step_time():
    # llm-foundry row 1: MPT-70b on 512 H100s, global batch 4,096 of 2,048 tokens, micro-batch
    # 8, FSDP FULL_SHARD, full checkpointing: 1,007 tokens/s/GPU, so a step is
    # 4096 x 2048 / (1007 x 512) = 16.270 s.
    row = published_row("llmfoundry_mpt.csv", 1)
    assert row.measured_step_s == pytest.approx(4096 * 2048 / (1007 * 512))
    assert 16.26 < row.measured_step_s < 16.28
    c = row.config
    assert (c.dp, c.zero_stage, c.micro_batch_size, c.grad_accum_steps) == (512, 3, 8, 1)
    assert c.activation_checkpointing == "full"
    assert row.cost.cluster.name == "h100-80g"


def test_grad_accum_is_derived_from_the_global_batch():
    # Megatron-Bridge row 7: Qwen3-30B-A3B on 8 GB300, tp 1 pp 1 ep 8, micro-batch 8 of global
    # 512, MXFP8: dp 8, so 512 / (8 x 8) = 8 micro-batches; 44,544 tokens/s/GPU at seq 4,096.
    row = published_row("nemo_megatron_bridge_perf_summary.csv", 7)
    c = row.config
    assert (c.dp, c.ep, c.micro_batch_size, c.grad_accum_steps) == (8, 8, 8, 8)
    assert c.precision == "mxfp8" and c.zero_stage == 1  # the distributed optimizer
    assert row.cost.model.name == "qwen3-30b-a3b"
    assert row.measured_step_s == pytest.approx(512 * 4096 / (44544 * 8))
    assert any("distributed optimizer" in a for a in row.assumptions)


def test_torchtitan_memory_in_gib_and_its_unpublished_sequence():
    # torchtitan row 1: Llama 3.1 8B on 8 Grand Teton H100s (96 GB), FSDP 8, 82.4 GiB.
    row = published_row("torchtitan_benchmarks.csv", 1)
    assert row.measured_memory_gb == pytest.approx(82.4 * 1.073741824)
    assert row.cost.cluster.memory_gb == 96
    assert row.cost.model.seq_len == 8192
    assert any("seq_len not published" in a for a in row.assumptions)


@pytest.mark.parametrize("change, field", [
    ({"gpu_type": "TPU v5p"}, "gpu_type TPU v5p"),
    ({"gpu_type": "AMD Instinct MI355X"}, "gpu_type AMD Instinct MI355X"),
    ({"precision": "NVFP4"}, "precision NVFP4"),
    ({"metric_name": "time_to_train_min"}, "not a step time"),
    ({"framework": "MaxText"}, "framework MaxText"),
    ({"tp": "3"}, "layout"),
    ({"dp": "5"}, "dp 5"),
])
def test_what_the_model_cannot_price_is_named(change, field):
    values = {**ROWS[("dlperf_gpt_v100.csv", 7)], **change}
    result = price_row(values)
    assert isinstance(result, Unpriced)
    assert field in result.reason and "\n" not in result.reason


def test_every_corpus_row_is_priced_or_says_why_in_one_line():
    results = [price_row(values) for values in ROWS.values()]
    reasons = [r.reason for r in results if isinstance(r, Unpriced)]
    assert all(r.strip() and "\n" not in r for r in reasons)
    priced_rows = [r for r in results if isinstance(r, PricedRow)]
    assert len(priced_rows) + len(reasons) == 1588
    assert all(r.measured_step_s > 0 and r.landscape.startswith(r.series) for r in priced_rows)
    assert all(r.cost.estimate(r.config).step_time_s > 0 for r in priced_rows[::25])


@pytest.mark.parametrize("file, number", [("nemo_24.07_perf_summary.csv", 18),
                                          ("nemo_megatron_bridge_perf_summary.csv", 73)])
def test_a_lora_row_is_not_priced_as_training(file, number):
    # Both rows publish task LoRA for Llama 2/3 70B on 8 H100s: adapters trained on frozen
    # weights, which hold no gradients or optimizer state; pricing them as full training put
    # them at 228-237 GB.
    assert ROWS[(file, number)]["task"] == "LoRA"
    assert price_row(ROWS[(file, number)]) == Unpriced(
        "task LoRA: parameter-efficient fine-tuning, not modelled")


def test_full_fine_tuning_stays_priced_as_training():
    # NeMo 24.07 row 13: SFT of Llama 2 7B on 8 H100s, every weight trained.
    row = published_row("nemo_24.07_perf_summary.csv", 13)
    assert ROWS[("nemo_24.07_perf_summary.csv", 13)]["task"] == "SFT"
    assert row.cost.model.name == "llama-7b" and row.config.dp == 8


def test_every_parameter_efficient_row_of_the_corpus_is_unpriced():
    peft = [(key, v) for key, v in ROWS.items()
            if any(w in (v.get("task", "") + " " + v["model"] + " " + v["notes"]).lower()
                   for w in ("lora", "peft", "adapter"))]
    assert len(peft) >= 5 + 3 + 12  # Megatron-Bridge, NeMo 24.07, dgxc-benchmarking
    for key, values in peft:
        result = price_row(values)
        assert isinstance(result, Unpriced), key
        assert "parameter-efficient fine-tuning, not modelled" in result.reason, key


def test_unpublished_recompute_is_the_least_the_model_says_fits():
    # Megatron-Bridge row 167: Llama 3 70B (80 layers, hidden 8,192) on 64 GB300 (279 GB),
    # pp 4 without interleaving, micro-batch 2 at seq 8,192, a layout no preset of its release
    # sets, so its recompute is not known from the code (published_recipes.py). By hand
    # (Korthikanti et al. 2022, flash attention): a layer keeps 34·s·b·h bytes = 4.56 GB of a
    # micro-batch without recompute; the first stage's 20 layers hold the pp = 4 micro-batches
    # 1F1B keeps in flight: 365 GB, beyond 279 GB; selective recompute only drops the attention
    # scores that flash attention never stores, so it does not fit either. Full keeps 2·s·b·h a
    # layer and micro-batch plus one layer's working set: it fits.
    row = published_row("nemo_megatron_bridge_perf_summary.csv", 167)
    assert row.config.activation_checkpointing == "full"
    assert "recompute not published: the least the model says fits, full" in row.assumptions
    assert row.cost.fits(row.config)
    assert "recompute" in row.unpublished_memory_settings
    without = row.cost.memory(replace(row.config, activation_checkpointing="none"))
    assert 365 < without.activations / 1e9 < 366 and without.total / 1e9 > 279
    # NeMo 24.07 row 6: Llama 2 13B on 16 H100s, pp 4 with 10 virtual stages, micro-batch 1
    # (the launcher's script runs this layout on 8 GPUs, so its code does not say what ran):
    # a quarter of the weights and their states, and the first stage's in-flight activations,
    # fit in 80 GB without recompute, so none is the least.
    small = published_row("nemo_24.07_perf_summary.csv", 6)
    assert small.config.activation_checkpointing == "none"
    assert "recompute not published: the least the model says fits, none" in small.assumptions
    assert small.cost.memory(small.config).total / 1e9 < 80


def test_published_memory_settings_are_told_apart():
    # DLPerf row 1 publishes its recompute and micro-batch; NeMo's long-sequence rows neither.
    assert published_row("dlperf_gpt_v100.csv", 1).unpublished_memory_settings == ()
    long_sequence = [price_row(v) for (f, _), v in ROWS.items()
                     if f == "nemo_long_sequence_cp.csv"]
    assert {r.unpublished_memory_settings for r in long_sequence
            if isinstance(r, PricedRow)} == {("micro_batch", "recompute")}


def test_an_h800_is_priced_on_its_preset():
    for gpu_type in ("H800", "NVIDIA H800-SXM-80GB"):
        assert cluster_of(gpu_type).name == "h800-80g"


def test_a_submission_config_without_recompute_publishes_none():
    # MLPerf row 1: GPT-3 175B on 512 H100s; its config sets ACT_CKPT_GRANULARITY=null, which
    # turns recompute off: published, so no rule chooses it.
    values = ROWS[("mlperf_training_llm.csv", 1)]
    assert values["recompute"] == "null" and "ACT_CKPT_GRANULARITY=null" in values["config_kv"]
    row = published_row("mlperf_training_llm.csv", 1)
    assert row.config.activation_checkpointing == "none"
    assert row.unpublished_memory_settings == ()


def test_a_submission_without_interleaving_in_its_script_runs_its_configs_default():
    # MLPerf v3.1 rows 22 (NVIDIA, 1,280 nodes) and 16 (Azure+NVIDIA, 1,344 nodes): GPT-3 175B,
    # tp 4 pp 8, no vp column and no INTERLEAVED_PIPELINE in the config script; the gpt3
    # implementation's conf/custom.yaml reads ${oc.env:INTERLEAVED_PIPELINE,12}.
    for number in (16, 22):
        values = ROWS[("mlperf_training_llm.csv", number)]
        assert values["vp"] == "" and "INTERLEAVED_PIPELINE" not in values["config_kv"]
        assert "benchmarks/gpt3/implementations/pytorch/" in values["config_file"]
        row = published_row("mlperf_training_llm.csv", number)
        assert (row.config.pp_schedule, row.config.virtual_stages) == ("interleaved", 12)
        assert any("conf/custom.yaml" in a for a in row.assumptions)
    # A row that publishes its interleaving keeps it (v3.0, row 1: INTERLEAVED_PIPELINE=12),
    # and a Megatron row naming no such config stays at Megatron's default.
    assert published_row("mlperf_training_llm.csv", 1).config.virtual_stages == 12
    outside = {**ROWS[("mlperf_training_llm.csv", 22)], "config_file": "elsewhere.sh"}
    priced = price_row(outside)
    assert isinstance(priced, PricedRow) and priced.config.virtual_stages == 1
