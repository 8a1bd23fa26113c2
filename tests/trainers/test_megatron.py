"""Megatron-LM and Megatron-DeepSpeed: every flag a trial renders or an export writes exists in
that tool's parser (as read at the recorded commit), with a value in its choices, and their
training logs read back into results (iteration lines, memory, OOM, crashes)."""
# ruff: noqa: UP032  (the log lines are built with the tools' own str.format calls)

from __future__ import annotations

import json
import re
import shlex
from datetime import datetime
from functools import partial

import pytest
import yaml
from builders import make_spec
from conftest import EXAMPLES

from orchestrator.common.errors import SpecError
from orchestrator.export import export, formats
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.trainer_layouts import runnable
from orchestrator.trainers import Measure, MegatronDeepSpeedTrainer, MegatronLMTrainer, trainer_for
from orchestrator.trainers.megatron import megatron_args
from orchestrator.trainers.megatron.flags import (
    MEGATRON_DEEPSPEED_COMMIT,
    MEGATRON_DEEPSPEED_FLAGS,
    MEGATRON_LM_COMMIT,
    MEGATRON_LM_FLAGS,
    problems,
)
from orchestrator.trainers.result_reading import result_from_log
from orchestrator.trial.folder import TrialFolder

TABLES = {"megatron-lm": MEGATRON_LM_FLAGS, "megatron-deepspeed": MEGATRON_DEEPSPEED_FLAGS}
USER_ARGS = ["--data-path", "/data/pile_text_document", "--tokenizer-type=GPT2BPETokenizer",
             "--vocab-file=/data/vocab.json", "--merge-file=/data/merges.txt", "--lr=1e-4"]
GPT = "gpt-175b"
LLAMA_GQA = {"preset": "llama-7b", "num_kv_heads": 8}  # 32 query heads, 8 KV heads

# (what, Layout fields); world size 64 = tp * pp * dp
LAYOUTS = [
    ("tp8 pp4 interleaved, sequence parallel, full recompute, ZeRO-1",
     {"tp": 8, "pp": 4, "dp": 2, "zero_stage": 1, "micro_batch_size": 1, "grad_accum_steps": 8,
      "activation_checkpointing": "full", "sequence_parallel": True,
      "pp_schedule": "interleaved", "virtual_stages": 2}),
    ("tp4 pp2 1f1b, selective recompute, DDP",
     {"tp": 4, "pp": 2, "dp": 8, "zero_stage": 0, "micro_batch_size": 2, "grad_accum_steps": 4,
      "activation_checkpointing": "selective"}),
    ("tp2 pp1, no recompute, ZeRO-1",
     {"tp": 2, "pp": 1, "dp": 32, "zero_stage": 1, "micro_batch_size": 1, "grad_accum_steps": 2}),
]


# Eight nodes, a global batch of 128 sequences, Megatron's GPT script with the user's flags.
megatron_spec = partial(make_spec, {
    "name": "mega", "scale": {"nodes": 8, "global_batch_size": 128},
    "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4]},
    "trial": {"megatron": {"script": "pretrain_gpt.py", "args": USER_ARGS}}})


def layouts_for(tool: str):
    for what, fields in LAYOUTS:
        if tool == "megatron-deepspeed" and fields.get("virtual_stages", 1) > 1:
            fields = {**fields, "pp_schedule": "1f1b", "virtual_stages": 1}
        yield what, Layout(**fields)


def exported_args(text: str) -> list[str]:
    body = text.split("MEGATRON_ARGS=(", 1)[1].rsplit(")", 1)[0]
    return shlex.split(body)


@pytest.mark.parametrize("model", [GPT, LLAMA_GQA], ids=["gpt", "llama-gqa"])
@pytest.mark.parametrize("tool", list(TABLES))
def test_every_rendered_and_exported_flag_is_in_the_tools_parser(tool, model, tmp_path):
    spec = megatron_spec(trainer=tool, model=model)
    adapter = trainer_for(spec)
    for what, config in layouts_for(tool):
        run = adapter.run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), steps=5)
        assert run.launcher == "torchrun" and run.program[0] == "pretrain_gpt.py"
        assert problems(run.program[1:], TABLES[tool]) == [], what
        exported = exported_args(export(tool, spec, "t1", config))
        assert problems(exported, TABLES[tool]) == [], what
        # one rendering: the export is the trial's layout flags, bar the config's path
        assert exported == megatron_args(tool, spec, config)
        layout = megatron_args(tool, spec, config, str(TrialFolder.of(tmp_path, "t1").path
                                                       / "ds_config.json"))
        assert run.program[1:1 + len(USER_ARGS) + len(layout)] == USER_ARGS + layout


def test_the_check_catches_what_a_parser_refuses():
    assert problems(["--normalization=rmsnorm"], MEGATRON_LM_FLAGS) == [
        "--normalization: 'rmsnorm' is not one of LayerNorm, RMSNorm"]
    unknown = "--zero-stage: not an argument of this parser"
    assert problems(["--zero-stage=1"], MEGATRON_LM_FLAGS) == [unknown]
    assert problems(["--bf16=true"], MEGATRON_LM_FLAGS)[0].startswith("--bf16: a switch")
    assert problems(["--num-layers", "many"], MEGATRON_LM_FLAGS)[0].endswith("not a int")
    assert problems(["--group-query-attention"], MEGATRON_DEEPSPEED_FLAGS) != []


def test_llama_with_gqa_in_each_tools_words(tmp_path):
    config = Layout(tp=8, pp=1, dp=8, zero_stage=1, micro_batch_size=1,
                            grad_accum_steps=2)
    lm = megatron_args("megatron-lm", megatron_spec(trainer="megatron-lm", model=LLAMA_GQA),
                       config)
    ds = megatron_args("megatron-deepspeed", megatron_spec(trainer="megatron-deepspeed",
                                                           model=LLAMA_GQA), config)
    for flag in ("--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
                 "--bf16", "--ffn-hidden-size=11008"):
        assert flag in lm and flag in ds
    assert {"--group-query-attention", "--num-query-groups=8", "--normalization=RMSNorm",
            "--position-embedding-type=rope", "--use-distributed-optimizer"} <= set(lm)
    assert not [a for a in lm if a.startswith(("--deepspeed", "--zero-stage"))]
    assert {"--num-key-value-heads=8", "--normalization=rmsnorm",
            "--use-rotary-position-embeddings", "--no-position-embedding", "--deepspeed",
            "--deepspeed_config=ds_config.json", "--zero-stage=1",
            "--no-pipeline-parallel"} <= set(ds)
    assert "--group-query-attention" not in ds and "--use-distributed-optimizer" not in ds

def test_gpt_keeps_layernorm_gelu_learned_positions_and_tied_embeddings():
    config = Layout(tp=8, pp=8, dp=1, micro_batch_size=1, grad_accum_steps=128)
    lm = megatron_args("megatron-lm", megatron_spec(trainer="megatron-lm", model=GPT), config)
    ds = megatron_args("megatron-deepspeed", megatron_spec(trainer="megatron-deepspeed",
                                                           model=GPT), config)
    assert {"--normalization=LayerNorm", "--position-embedding-type=learned_absolute",
            "--num-layers=96", "--hidden-size=12288", "--ffn-hidden-size=49152",
            "--num-attention-heads=96", "--seq-length=2048"} <= set(lm)
    assert "--normalization=layernorm" in ds and "--no-pipeline-parallel" not in ds
    for args in (lm, ds):
        assert not {"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                    "--group-query-attention", "--use-rotary-position-embeddings"} & set(args)
        assert not [a for a in args if "key-value" in a or "query-groups" in a]


def test_recompute_and_virtual_stages_per_tool():
    config = dict(LAYOUTS[0][1])
    lm = megatron_args("megatron-lm", megatron_spec(trainer="megatron-lm", model=GPT),
                       Layout(**config))
    assert {"--num-virtual-stages-per-pipeline-rank=2", "--sequence-parallel",
            "--recompute-granularity=full", "--recompute-method=uniform",
            "--recompute-num-layers=1"} <= set(lm)
    config.update(pp_schedule="1f1b", virtual_stages=1)
    ds = megatron_args("megatron-deepspeed",
                       megatron_spec(trainer="megatron-deepspeed", model=GPT),
                       Layout(**config))
    assert {"--checkpoint-activations", "--checkpoint-num-layers=1",
            "--deepspeed-activation-checkpointing"} <= set(ds)


def test_megatron_lm_zero_stages_2_and_3_are_refused_early(tmp_path, cli):
    spec = megatron_spec(trainer="megatron-lm", model=GPT)
    assert spec.space.zero_stage == [0, 1]  # the default, narrowed
    with pytest.raises(SpecError, match=r"space\.zero_stage: megatron-lm has no ZeRO stage 3"):
        megatron_spec(trainer="megatron-lm", model=GPT, space={"zero_stage": [0, 3]})
    path = tmp_path / "bad.yaml"
    data = yaml.safe_load((EXAMPLES / "megatron-lm.yaml").read_text())
    data["space"]["zero_stage"] = [1, 2]
    path.write_text(yaml.safe_dump(data))
    code, out, err = cli("run", str(path), "--dry-run")
    assert code == 2 and err.count("\n") == 1 and "space.zero_stage" in err and out == ""
    with pytest.raises(SpecError, match="ZeRO-1"):  # a layout given directly is refused too
        megatron_args("megatron-lm", megatron_spec(trainer="megatron-lm", model=GPT),
                      Layout(tp=8, pp=8, dp=1, zero_stage=3))
    assert megatron_spec(trainer="megatron-deepspeed", model=GPT,
                         space={"zero_stage": [3]}).space.zero_stage == [3]


@pytest.mark.parametrize("tool,space,key", [
    ("megatron-deepspeed", {"pp_schedule": ["interleaved"], "virtual_stages": [2]},
     "space.virtual_stages"),
    ("megatron-lm", {"pp_schedule": ["gpipe"]}, "space.pp_schedule"),
    ("megatron-lm", {"kind": "amsp"}, "space.kind"),
])
def test_layouts_a_megatron_trainer_cannot_express(tool, space, key):
    with pytest.raises(SpecError, match=key.replace(".", r"\.")):
        megatron_spec(trainer=tool, model=GPT, space=space)


def test_megatron_deepspeed_writes_its_deepspeed_config(tmp_path):
    (tmp_path / "base.json").write_text(json.dumps({"zero_optimization": {"overlap_comm": True},
                                                    "wall_clock_breakdown": False}))
    spec = megatron_spec(trainer="megatron-deepspeed", model=GPT, space={"zero_stage": [2]})
    spec.trial.workdir = str(tmp_path)
    spec.trial.megatron.deepspeed_config = "base.json"
    config = Layout(tp=8, pp=1, dp=8, zero_stage=2, micro_batch_size=2,
                            grad_accum_steps=8)
    run = MegatronDeepSpeedTrainer().run(spec, config, "t3", TrialFolder.of(tmp_path, "t3"), 4)
    ds = json.loads(run.files["ds_config.json"])
    assert ds["zero_optimization"] == {"overlap_comm": True, "stage": 2}
    assert ds["train_batch_size"] == 128 and ds["train_micro_batch_size_per_gpu"] == 2
    assert "--zero-stage=2" in run.program and "--train-iters=6" in run.program
    assert run.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    lm = MegatronLMTrainer().run(megatron_spec(trainer="megatron-lm", model=GPT),
                                 Layout(pp=8, dp=8), "t4",
                                 TrialFolder.of(tmp_path, "t4"), 4)
    assert lm.files == {} and lm.env == {} and "--log-throughput" in lm.program


def test_export_formats_name_the_tool_and_commit_and_keep_the_old_name():
    assert {"megatron-lm", "megatron-deepspeed", "megatron"} <= set(formats())
    spec = megatron_spec(trainer="megatron-lm", model=LLAMA_GQA)
    config = Layout(tp=8, pp=8, dp=1)
    lm = export("megatron-lm", spec, "t7", config)
    assert "'mega'" in lm and "t7" in lm and MEGATRON_LM_COMMIT in lm
    ds = export("megatron-deepspeed", spec, "t7", config)
    assert MEGATRON_DEEPSPEED_COMMIT in ds and export("megatron", spec, "t7", config) == ds
    quickstart = load_spec(EXAMPLES / "quickstart.yaml")  # a builtin campaign exports too
    text = export("megatron", quickstart, "t1", Layout(tp=1, pp=1, dp=2))
    assert "--tensor-model-parallel-size=1" in exported_args(text)


@pytest.mark.parametrize("name", ["megatron-lm", "megatron-deepspeed"])
def test_examples_base_args_are_in_the_tools_parser(name):
    spec = load_spec(EXAMPLES / f"{name}.yaml")
    assert spec.trial.trainer == name
    assert problems(spec.trial.megatron.args, TABLES[name]) == []
    assert ("--mock-data" in spec.trial.megatron.args) == (name == "megatron-lm")


# ---------------------------------------------------------------- logs, in each tool's format

MEASURE = Measure(world_size=8, seq_len=2048, tokens_per_step=32 * 2048,
                  model_flops_per_step=8 * 100e12, peak_tflops=989.0, warmup_steps=1)


def lm_line(it: int, ms: float, tflops: float, loss: float) -> str:
    """megatron/training/training.py training_log, with --log-throughput."""
    stamp = datetime(2026, 11, 30, 10, 0, it).strftime('%Y-%m-%d %H:%M:%S.%f')
    return (f" [{stamp}]" + " iteration {:8d}/{:8d} |".format(it, 5)
            + " consumed samples: {:12d} |".format(32 * it)
            + " elapsed time per iteration (ms): {:.1f} |".format(ms)
            + f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
            + f" learning rate: {1e-4:.6E} |" + f" global batch size: {32:5d} |"
            + " {}: {:.6E} |".format("lm loss", loss) + f" loss scale: {1.0:.1f} |"
            + f" grad norm: {1.234:.3f} |" + " number of skipped iterations: {:3d} |".format(0)
            + " number of nan iterations: {:3d} |".format(0))


def ds_line(it: int, ms: float, loss: float) -> str:
    """Megatron-DeepSpeed megatron/training.py training_log (two lines)."""
    samples = 32 / (ms / 1000)
    return (" iteration {:8d}/{:8d} |".format(it, 5) + " consumed samples: {:12d} |".format(32 * it)
            + " consumed tokens: {:12d} |".format(32 * 2048 * it)
            + " elapsed time per iteration (ms): {:.1f} |".format(ms)
            + " learning rate: {:.3E} |".format(1e-4) + " global batch size: {:5d} |".format(32)
            + " {}: {:.6E} |".format("lm loss", loss) + " loss scale: {:.1f} |".format(4096.0)
            + " actual seqlen: {:5d} |".format(2048)
            + " number of skipped iterations: {:3d} |".format(0)
            + " number of nan iterations: {:3d} |".format(0)
            + " samples per second: {:.3f} |".format(samples)
            + " tokens per gpu per second (tgs): {:.3f} |".format(samples * 2048 / 8)
            + " TFLOPs: {:.2f} |".format(999.0) + " \n TeraFLOPs: {:.2f} |".format(999.0)
            + " params(B): {:.2f} |".format(175.0) + " moe params(B): {:.2f}|".format(0.0))


MEMORY = ("[Rank 0] (after 1 iterations) memory (MB) | allocated: 10240.0 | max allocated: "
          "40960.0 | reserved: 45000.0 | max reserved: 45000.0")


def test_megatron_lm_log_is_read():
    log = "\n".join([lm_line(1, 3000.0, 50.0, 11.0), MEMORY, lm_line(2, 1000.0, 150.0, 10.5),
                     lm_line(2, 1000.0, 150.0, 10.5), lm_line(3, 1000.0, 150.0, 10.0)])
    metrics = MegatronLMTrainer().parse_log(log)
    assert metrics.step_times_s == [3.0, 1.0, 1.0] and metrics.losses == [11.0, 10.5, 10.0]
    result = result_from_log(MegatronLMTrainer(), log, 0, MEASURE)
    assert result.status == "ok" and result.step_time_s == pytest.approx(1.0)
    assert result.tflops_per_gpu == pytest.approx(150.0) and result.peak_memory_gb == 40.0
    assert result.tokens_per_s == pytest.approx(32 * 2048) and result.loss_last == 10.0
    assert result.mfu == pytest.approx(150.0 / 989.0)


def test_megatron_deepspeed_log_is_read_without_its_hardware_tflops():
    log = "\n".join([ds_line(1, 4000.0, 11.0), MEMORY, ds_line(2, 2000.0, 10.4),
                     ds_line(3, 2000.0, 10.2)])
    result = result_from_log(MegatronDeepSpeedTrainer(), log, 0, MEASURE)
    assert result.status == "ok" and result.step_time_s == pytest.approx(2.0)
    assert result.tokens_per_s == pytest.approx(32 * 2048 / 2.0, rel=1e-3)
    assert result.tflops_per_gpu == pytest.approx(8 * 100e12 / 2.0 / 8 / 1e12)  # not 999
    assert result.peak_memory_gb == 40.0 and result.loss_first == 11.0


@pytest.mark.parametrize("adapter", [MegatronLMTrainer(), MegatronDeepSpeedTrainer()])
@pytest.mark.parametrize("message", [
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 "
     "has a total capacity of 79.11 GiB of which 1.06 GiB is free."),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total "
     "capacity of 63.98 GiB of which 0 bytes is free."),
], ids=["cuda", "hip"])
def test_out_of_memory_is_oom(adapter, message):
    log = "\n".join([lm_line(1, 3000.0, 50.0, 11.0), "Traceback (most recent call last):",
                     message])
    result = result_from_log(adapter, log, 1, MEASURE)
    assert result.status == "oom" and "out of memory" in result.error


@pytest.mark.parametrize("adapter", [MegatronLMTrainer(), MegatronDeepSpeedTrainer()])
def test_a_crash_before_any_iteration_is_failed_with_its_exception(adapter):
    log = "\n".join([  # noqa: FLY002
        "using world size: 8, data-parallel size: 1, context-parallel size: 1",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "pretrain_gpt.py", line 300, in <module>',
        "[rank0]: AssertionError: number of layers should be divisible by the pipeline size",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ])
    result = result_from_log(adapter, log, 1, MEASURE)
    assert result.status == "failed"
    assert result.error.startswith(f"{adapter.name}: AssertionError: number of layers")


# --- mixture of experts on Megatron-DeepSpeed (Megatron-LM's: tests/trainers/test_moe_trainers.py) --

def moe_spec(model, **space):
    return megatron_spec(trainer="megatron-deepspeed", model=model, space=space)


def test_megatron_deepspeed_renders_deepspeeds_moe_layer(tmp_path):
    """Its parser's MoE flags (as read at the recorded commit), every layer an MoE layer, and
    the experts' width as --ffn-hidden-size: its experts are copies of its MLP."""
    spec = moe_spec("tiny-moe", tp=[1, 2], pp=[1])
    table = TABLES["megatron-deepspeed"]
    for fields, tensor_parallel_experts in (({"tp": 2, "dp": 32}, True),
                                            ({"tp": 2, "dp": 32, "etp": 1}, False),
                                            ({"tp": 1, "dp": 64, "ep": 8}, False)):
        config = Layout(**{"micro_batch_size": 1, "grad_accum_steps": 2, **fields})
        args = megatron_args("megatron-deepspeed", spec, config)
        assert problems(args, table) == []
        assert {"--num-experts=8", "--topk=2", "--expert-interval=1",
                f"--moe-expert-parallel-size={config.ep}", "--create-moe-param-group",
                "--ffn-hidden-size=344"} <= set(args)
        assert ("--enable-expert-tensor-parallelism" in args) == tensor_parallel_experts
        run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), steps=5)
        assert problems(run.program[1:], table) == []


@pytest.mark.parametrize("model,space,refusal", [
    ("qwen2-57b-a14b", {"tp": [1, 2, 4]}, "model.shared_expert_ffn_hidden: megatron-deepspeed "
     "has no shared experts"),
    ({"preset": "mixtral-8x7b", "first_dense_layers": 2}, {},
     "model.first_dense_layers: megatron-deepspeed puts experts on layers N, 2N"),
    ("mixtral-8x7b", {"zero_stage": [2, 3]}, "space.zero_stage: DeepSpeed's native MoE layer "
     "refuses ZeRO stage 3"),
])
def test_megatron_deepspeed_refuses_what_its_moe_layer_cannot_build(model, space, refusal):
    with pytest.raises(SpecError, match=re.escape(refusal)):
        moe_spec(model, **space)


def test_megatron_deepspeed_moe_layouts_it_cannot_run_are_dropped_with_the_reason():
    spec = moe_spec("mixtral-8x7b", tp=[8], pp=[4], ep=[1, 2, 4], etp=[None, 1, 2])
    assert spec.space.zero_stage == [0, 1, 2]  # the default less stage 3
    kept = spec.candidates()
    assert kept and all(c.dp % c.ep == 0 and c.etp in (None, 1) for c in kept)
    refused: list[str] = []
    runnable(spec, spec.search_space().candidates(), refused)
    assert any("ep(4) must divide dp(2)" in r for r in refused)
    assert any("etp(2) must be 1 or tp(8)" in r for r in refused)
    with pytest.raises(SpecError, match=r"no layout trainer megatron-deepspeed can run: "
                                        r"megatron-deepspeed: ep\(4\) must divide dp\(2\)"):
        moe_spec("mixtral-8x7b", tp=[8], pp=[4], ep=[4], etp=[1]).candidates()


def test_the_long_context_example_renders_only_parser_flags():
    """examples/megatron-long-context.yaml: every layout it keeps renders flags of Megatron-LM's
    parser, with its context parallelism; the a2a layouts whose key/value heads do not split
    over cp are dropped with the reason."""
    spec = load_spec(EXAMPLES / "megatron-long-context.yaml")
    assert problems(spec.trial.megatron.args, MEGATRON_LM_FLAGS) == []
    refused: list[str] = []
    kept = runnable(spec, spec.search_space().candidates(), refused)
    assert {c.cp for c in kept} == {1, 2, 4} and kept == spec.candidates()
    for config in kept:
        args = megatron_args("megatron-lm", spec, config)
        assert problems(args, MEGATRON_LM_FLAGS) == []
        assert f"--context-parallel-size={config.cp}" in args
    assert refused and all("cp_comm_type a2a splits the" in r for r in refused)
    assert not any(c.tp == 8 and c.cp > 1 and c.cp_comm_type == "a2a" for c in kept)
