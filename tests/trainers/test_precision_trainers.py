"""Precision, offload, overlap and bucket layouts in Megatron-LM and torchtitan: the flags each
renders, checked against the tool's own classes and parsers (megatron-core 0.19.2's config
dataclasses and Megatron-LM's parser, torchtitan 0.3.0's config manager and converters); the
values each refuses, with its reason in one line that names the field and the fix.

torchtitan's FP8 converters need torchao and a GPU of their generation (Float8: SM89+, MXFP8:
SM100+) when the config is built; the tests that build one stand in for the device check
(`has_cuda_capability`), and are skipped where torchao is not installed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from functools import partial
from pathlib import Path

import pytest
from builders import layout, make_spec
from test_moe_trainers import generated, mcore  # noqa: F401  (megatron-core's fixtures)
from test_torchtitan import parse  # noqa: F401  (torchtitan's own parser)
from trainer_checks import one_line_refusal, parsed_in_child

from orchestrator.common.errors import SpecError
from orchestrator.trainers.megatron.export import export_megatron
from orchestrator.trainers.torchtitan.export import export_torchtitan
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.trainers import trainer_for
from orchestrator.trainers.megatron import megatron_args
from orchestrator.trainers.megatron.flags import MEGATRON_LM_FLAGS, problems
from orchestrator.trainers.megatron.precision import CHANGES_FILE, FP8_FLAGS
from orchestrator.trainers.torchtitan import export_values, torchtitan_args
from orchestrator.trainers.torchtitan.precision import REGISTRY_MODULE
from orchestrator.trial.folder import TrialFolder

ROOT = Path(__file__).resolve().parent.parent.parent
FP8 = tuple(FP8_FLAGS)  # Megatron-LM's recipes, as ParaTune names them

# The default spec, named so that exports say where they come from.
precision_spec = partial(make_spec, {"name": "precision"})


# --- Megatron-LM -----------------------------------------------------------------------------

MEGATRON_CASES = [
    *(layout(precision=p) for p in FP8),
    layout(offload="optimizer"),
    layout(precision="fp8-delayed", offload="optimizer", overlap_comm=True, bucket_size=10**8),
    layout(zero_stage=0, overlap_comm=True, bucket_size=4 * 10**7),
    layout(overlap_comm=False),
    layout(cp=2, dp=4, precision="mxfp8"),
]


@pytest.mark.parametrize("config", MEGATRON_CASES, ids=lambda c: c.key())
def test_megatron_lm_precision_flags_are_megatron_cores(config, generated):  # noqa: F811
    args = megatron_args("megatron-lm", precision_spec(trainer="megatron-lm"), config)
    assert problems(args, {**MEGATRON_LM_FLAGS, **generated}) == []
    if config.precision != "bf16":
        fmt, recipe = FP8_FLAGS[config.precision]
        assert [f"--fp8-format={fmt}", f"--fp8-recipe={recipe}"] == [
            a for a in args if a.startswith("--fp8-")]
        assert fmt in generated["--fp8-format"].choices
        assert recipe in generated["--fp8-recipe"].choices
        assert args.count("--transformer-impl=transformer_engine") == 1
    offload = {"--optimizer-cpu-offload", "--use-precision-aware-optimizer"}
    assert offload <= set(args) if config.offload == "optimizer" else not offload & set(args)
    assert ("--overlap-grad-reduce" in args) == bool(config.overlap_comm)
    assert ("--overlap-param-gather" in args) == bool(config.overlap_comm and config.zero_stage)
    bucket = f"--ddp-bucket-size={config.bucket_size}"
    assert (bucket in args) == (config.bucket_size is not None)


def test_megatron_cores_classes_take_the_rendered_values(mcore):  # noqa: F811
    """The FP8 formats and recipes are TransformerConfig's; offload, overlap and the bucket are
    OptimizerConfig's and DistributedDataParallelConfig's, which refuse the precision-aware
    optimizer (that offload needs) without the distributed optimizer."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    for fmt, recipe in FP8_FLAGS.values():
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, fp8=fmt,
                          fp8_recipe=recipe)
    OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, params_dtype=torch.bfloat16,
                    use_distributed_optimizer=True, use_precision_aware_optimizer=True,
                    optimizer_cpu_offload=True, optimizer_offload_fraction=1.0)
    with pytest.raises(AssertionError, match="only supported with distributed optimizer"):
        OptimizerConfig(optimizer="adam", use_precision_aware_optimizer=True,
                        optimizer_cpu_offload=True)
    DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True,
                                  use_distributed_optimizer=True, bucket_size=10**8)
    training = Path(mcore.__file__).parent.parent / "training"
    arguments = (training / "arguments.py").read_text()
    assert "The optimizer cpu offload must be used in conjunction with " \
           "`--use-precision-aware-optimizer`" in arguments
    assert "'Must use --overlap-param-gather with --overlap-grad-reduce'" in arguments
    assert "if ``overlap_grad_reduce``\n    is False: ``None``" in (
        training / "training.py").read_text()


PARSE_PRECISION = """
import json, sys, typing, warnings, argparse
warnings.filterwarnings("ignore")
if not hasattr(typing, "override"):
    import typing_extensions
    typing.override = typing_extensions.override
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
keys = ("fp8", "fp8_recipe", "transformer_impl", "optimizer_cpu_offload",
        "use_precision_aware_optimizer", "optimizer_offload_fraction", "overlap_grad_reduce",
        "overlap_param_gather", "ddp_bucket_size", "use_distributed_optimizer")
print(json.dumps([{k: getattr(parser.parse_args(a), k) for k in keys}
                  for a in json.loads(sys.argv[1])]))
"""


def test_megatron_lms_own_parser_reads_the_precision_flags(mcore):  # noqa: F811
    """After base arguments that set other values, the layout's win."""
    base = ["--fp8-format=e4m3", "--fp8-recipe=delayed", "--transformer-impl=local",
            "--optimizer-offload-fraction=0.5", "--ddp-bucket-size=1"]
    spec = precision_spec(trainer="megatron-lm")
    rendered = [base + megatron_args("megatron-lm", spec, c) for c in MEGATRON_CASES]
    parsed_rows = parsed_in_child(PARSE_PRECISION, rendered)
    for config, parsed in zip(MEGATRON_CASES, parsed_rows):
        if config.precision != "bf16":
            assert (parsed["fp8"], parsed["fp8_recipe"]) == FP8_FLAGS[config.precision]
            assert parsed["transformer_impl"] == "transformer_engine"
        offload = config.offload == "optimizer"
        assert parsed["optimizer_cpu_offload"] == parsed["use_precision_aware_optimizer"] == offload
        assert parsed["optimizer_offload_fraction"] == (1.0 if offload else 0.5)
        assert parsed["overlap_grad_reduce"] == bool(config.overlap_comm)
        assert parsed["overlap_param_gather"] == bool(config.overlap_comm and config.zero_stage)
        assert parsed["use_distributed_optimizer"] == (config.zero_stage == 1)
        assert parsed["ddp_bucket_size"] == (config.bucket_size or 1)


def test_overlap_false_takes_the_base_switches_out_and_says_so(tmp_path):
    base = ["--mock-data", "--overlap-grad-reduce", "--overlap-param-gather",
            "--overlap-param-gather-with-optimizer-step"]
    spec = precision_spec(trainer="megatron-lm", trial={"megatron": {"args": list(base)}})
    folder = TrialFolder.of(tmp_path, "t1")
    run = trainer_for(spec).run(spec, layout(overlap_comm=False), "t1", folder, 3)
    assert "--mock-data" in run.program and not any("overlap" in a for a in run.program)
    notes = run.files[CHANGES_FILE].splitlines()
    assert len(notes) == 3 and notes[0] == (
        "removed --overlap-grad-reduce from trial.megatron.args (the layout's overlap_comm is "
        "false)")
    kept = trainer_for(spec).run(spec, layout(), "t1", folder, 3)  # None keeps them
    assert base[1:] == [a for a in kept.program if "overlap" in a] and not kept.files
    # A bucket where the base arguments overlap: their setting decides, so it is rendered.
    assert "--ddp-bucket-size=1000" in megatron_args("megatron-lm", spec,
                                                     layout(bucket_size=1000))
    with pytest.raises(SpecError, match=r"megatron-lm: bucket_size 1000 without "
                                        r"--overlap-grad-reduce in trial.megatron.args"):
        megatron_args("megatron-lm", precision_spec(trainer="megatron-lm"),
                      layout(bucket_size=1000))


def test_megatron_lm_refuses_in_one_line():
    spec = precision_spec(trainer="megatron-lm")
    assert one_line_refusal(spec, layout(precision="fp8-rowwise"), layout()).startswith(
        "megatron-lm: precision fp8-rowwise: megatron-core's --fp8-recipe; set space.precision")
    assert "--optimizer-cpu-offload offloads the distributed optimizer's states; use " \
           "zero_stage 1" in one_line_refusal(
               spec, layout(zero_stage=0, offload="optimizer"), layout(zero_stage=0))
    assert "offload optimizer+params: it offloads optimizer only" in one_line_refusal(
        spec, layout(zero_stage=3, offload="optimizer+params", pp=1), layout(zero_stage=3))
    reason = one_line_refusal(spec, layout(overlap_comm=False, bucket_size=10**6), layout())
    assert reason.startswith("megatron-lm: bucket_size with overlap_comm false")
    cpu = precision_spec(trainer="megatron-lm", cluster={"preset": "h100-80g", "device": "cpu"})
    with pytest.raises(SpecError, match="GPU kernels, not on a CPU cluster; set space.precision"):
        megatron_args("megatron-lm", cpu, layout(precision="fp8-tensorwise"))


def test_a_megatron_lm_export_carries_the_precision_flags():
    config = layout(precision="fp8-blockwise", offload="optimizer", overlap_comm=True)
    text = export_megatron("megatron-lm", precision_spec(trainer="megatron-lm"), "t1", config)
    for flag in ("--fp8-format=e4m3", "--fp8-recipe=blockwise", "--optimizer-cpu-offload",
                 "--use-precision-aware-optimizer", "--overlap-grad-reduce",
                 "--overlap-param-gather"):
        assert f"  {flag}\n" in text


# --- torchtitan ------------------------------------------------------------------------------

TITAN = {"module": "llama3", "config": "llama3_8b"}
QWEN_MOE = {"module": "qwen3", "config": "qwen3_30b_a3b"}


def titan_spec(section=TITAN, model="llama-7b"):
    return precision_spec(trainer="torchtitan", model=model, trial={"torchtitan": section})


def titan_layout(**fields) -> Layout:
    return layout(zero_stage=3, **fields)


@pytest.fixture
def fp8_devices(monkeypatch):
    """torchao present, and the converters' device checks (SM89+, SM100+) passed."""
    pytest.importorskip("torchao", reason="torchtitan's FP8 converters need torchao")
    from torchtitan.components.quantization import float8, mx

    monkeypatch.setattr(float8, "has_cuda_capability", lambda *a: True)
    monkeypatch.setattr(mx, "has_cuda_capability", lambda *a: True)


def _linear_kinds(cfg) -> dict[str, str]:
    from torchtitan.models.common.linear import Linear

    return {fqn: type(c).__qualname__.split(".")[0]
            for fqn, c, _, _ in cfg.model_spec.model.traverse(Linear.Config)}


def _parsed(parse, spec, config, tmp_path):  # noqa: F811
    """The trial's and the launch file's arguments, each through torchtitan's ConfigManager."""
    run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), 3)
    text = export_torchtitan(spec, "t1", config)
    export = shlex.split(re.search(r"^ARGS=\(\n(.*?)\n\)$", text, re.M | re.S).group(1))
    return parse(run.program[2:]), parse(export)


@pytest.mark.parametrize("precision, kind", [("fp8-rowwise", "Float8Linear"),
                                             ("mxfp8", "MXFP8Linear")])
def test_torchtitan_fp8_layouts_load_in_its_config_manager(
        precision, kind, parse, fp8_devices, tmp_path):  # noqa: F811
    spec = titan_spec()
    config = titan_layout(precision=precision, offload="optimizer+params")
    args = torchtitan_args(spec, config, export_values(spec, config, "t1"))
    assert args[:4] == ["--module", REGISTRY_MODULE, "--config", f"llama3/llama3_8b/{precision}"]
    for cfg in _parsed(parse, spec, config, tmp_path):
        kinds = _linear_kinds(cfg)
        assert kinds["layers.0.feed_forward.w1"] == kind
        assert kinds["lm_head"] == ("Linear" if precision == "fp8-rowwise" else kind)
        assert cfg.training.enable_cpu_offload and cfg.training.disable_cuda_graphs
        assert cfg.parallelism.tensor_parallel_degree == 2


def test_torchtitan_fp8_reaches_an_moe_configs_experts(parse, fp8_devices, tmp_path):  # noqa: F811
    from torchtitan.models.common.moe import GroupedExperts

    spec = titan_spec(QWEN_MOE, model="qwen3-30b-a3b")
    trial, _ = _parsed(parse, spec, titan_layout(precision="fp8-rowwise"), tmp_path)
    owners = {type(c)._owner.__name__ for _, c, _, _ in trial.model_spec.model.traverse(
        GroupedExperts.Config)}
    assert owners and all(o.startswith("Float8") for o in owners), owners
    assert not any(k == "Float8Linear" for f, k in _linear_kinds(trial).items()
                   if "router.gate" in f or f == "lm_head")


def test_torchtitan_fp8_stops_in_torchtitans_own_words(parse, monkeypatch):  # noqa: F811
    """Without torchao (or on a device before SM89) the converter, not ParaTune, says so."""
    from torchtitan.components.quantization import float8

    monkeypatch.setattr(float8, "Float8Linear", None)
    spec, config = titan_spec(), titan_layout(precision="fp8-rowwise")
    args = torchtitan_args(spec, config, export_values(spec, config, "t1"))
    with pytest.raises(ImportError, match="torchao is not installed. Please install it to use "
                                          "float8 linear layers."):
        parse(args)
    import orchestrator.trainers.torchtitan.precision as registry

    with pytest.raises(AttributeError):
        registry.llama3_8b  # noqa: B018  (only MODULE/CONFIG/PRECISION names are configs)
    assert callable(getattr(registry, "llama3/llama3_8b/mxfp8"))


def test_torchtitan_offload_and_bf16_layouts(parse, tmp_path):  # noqa: F811
    spec = titan_spec()
    offload, plain = (_parsed(parse, spec, titan_layout(offload=o), tmp_path)[0]
                      for o in ("optimizer+params", "none"))
    assert offload.training.enable_cpu_offload and offload.training.disable_cuda_graphs
    assert not plain.training.enable_cpu_offload and not plain.training.disable_cuda_graphs
    assert set(_linear_kinds(plain).values()) == {"Linear"}


def test_torchtitan_refuses_in_one_line():
    spec = titan_spec()
    reason = one_line_refusal(spec, titan_layout(precision="fp8-tensorwise"), titan_layout())
    assert reason == ("torchtitan: precision fp8-tensorwise: torchtitan's Float8 converter "
                      "(recipe rowwise) and MX converter; set space.precision to one of "
                      "fp8-rowwise, mxfp8")
    assert "offload optimizer: it offloads optimizer+params only" in one_line_refusal(
        spec, titan_layout(offload="optimizer"), titan_layout())
    assert "set space.overlap_comm to [null]" in one_line_refusal(
        spec, titan_layout(overlap_comm=True), titan_layout())
    assert "set space.bucket_size to [null]" in one_line_refusal(
        spec, titan_layout(bucket_size=10**6), titan_layout())


def test_a_torchtitan_fp8_launch_file_puts_paratunes_registry_on_the_path():
    spec = load_spec(ROOT / "examples" / "torchtitan-fp8-rowwise.yaml")
    by_precision = {c.precision: c for c in spec.candidates()}
    fp8 = export_torchtitan(spec, "t0001", by_precision["fp8-rowwise"])
    assert 'export PYTHONPATH="${PARATUNE_ROOT:-' in fp8
    assert subprocess.run(["bash", "-n"], input=fp8, text=True).returncode == 0
    assert "PYTHONPATH" not in export_torchtitan(spec, "t0001", by_precision["bf16"])
