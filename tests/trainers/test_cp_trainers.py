"""Context-parallel layouts in every trainer: the flags each renders, checked against the tool's
own classes and parsers (megatron-core 0.19.2's config dataclasses and Megatron-LM's parser,
the Megatron-DeepSpeed parser table, torchtitan's config manager, DeepSpeed's DeepSpeedConfig);
the layouts each refuses, with its reason in one line that names the field and the fix; `{cp}`
and `{cp_comm_type}` for scripts and commands; exports that name the context-parallel layout.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from functools import partial
from pathlib import Path

import pytest
from builders import layout, make_spec
from conftest import EXAMPLES
from test_moe_trainers import generated, mcore  # noqa: F401  (megatron-core's fixtures)
from test_torchtitan import parse  # noqa: F401  (torchtitan's own parser)
from trainer_checks import (
    one_line_refusal,
    parsed_in_child,
    run_and_best,
    torchtitan_registry_configs,
)

from orchestrator.common.errors import SpecError
from orchestrator.export import export
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec, spec_from_dict
from orchestrator.trainers.torchtitan.configs import TORCHTITAN_VARLEN_CONFIGS, VARLEN_CP
from orchestrator.campaign_spec.notices import forget
from orchestrator.campaign_spec.trainer_layouts import runnable
from orchestrator.trainers import trainer_for
from orchestrator.trainers.deepspeed.config import deepspeed_config
from orchestrator.trainers.megatron import megatron_args, megatron_env
from orchestrator.trainers.megatron.context import MEGATRON_CP_COMM_TYPES
from orchestrator.trainers.megatron.flags import (
    MEGATRON_DEEPSPEED_FLAGS,
    MEGATRON_LM_CONFIG_FLAGS,
    MEGATRON_LM_FLAGS,
    problems,
)
from orchestrator.trainers.torchtitan import layout_args
from orchestrator.trial.folder import DEEPSPEED_CHANGES_FILE, DEEPSPEED_CONFIG_FILE, TrialFolder

LLAMA_LONG = {"preset": "llama-3.1-8b", "seq_len": 32768}  # 32 heads, 8 key/value heads
COMMS = ("p2p", "a2a", "allgather")


# Llama 3.1 8B at 32K tokens on the default two nodes, cp 2 unless a test says.
cp_spec = partial(make_spec, {"name": "cp", "model": LLAMA_LONG})
cp_layout = partial(layout, cp=2)
KEPT = cp_layout(cp=1)  # beside a layout each refuses: one without context parallelism


# --- Megatron-LM -----------------------------------------------------------------------------

@pytest.mark.parametrize("comm", COMMS)
@pytest.mark.parametrize("cp", [2, 4])
def test_megatron_lm_cp_flags_are_megatron_cores(cp, comm, generated):  # noqa: F811
    spec = cp_spec(trainer="megatron-lm")
    args = megatron_args("megatron-lm", spec, cp_layout(cp=cp, cp_comm_type=comm))
    assert problems(args, {**MEGATRON_LM_FLAGS, **generated}) == []
    assert f"--context-parallel-size={cp}" in args
    assert f"--cp-comm-type={MEGATRON_CP_COMM_TYPES[comm]}" in args
    assert "--transformer-impl=transformer_engine" in args and "--attention-backend=flash" in args
    assert megatron_env(spec, cp_layout(tp=1, cp=cp))["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    plain = megatron_args("megatron-lm", spec, cp_layout(cp=1))
    assert "--context-parallel-size=1" in plain and not any(
        a.startswith(("--cp-comm-type", "--transformer-impl")) for a in plain)


def test_megatron_cores_classes_hold_the_cp_fields(mcore, generated):  # noqa: F811
    """context_parallel_size is ModelParallelConfig's (a generated int flag), cp_comm_type
    TransformerConfig's own and excluded from generation (the parser's --cp-comm-type is written
    by hand), and the class names all_gather, not allgather, among its comm types."""
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel = {f.name: f for f in dataclasses.fields(ModelParallelConfig)}
    assert parallel["context_parallel_size"].type is int
    assert "cp_comm_type" not in parallel and "hierarchical_context_parallel_sizes" in parallel
    assert "cp_comm_type" in {f.name for f in dataclasses.fields(TransformerConfig)}
    assert generated["--context-parallel-size"].type is int
    assert "transformer_engine" in generated["--transformer-impl"].choices
    assert "--cp-comm-type" not in generated and "--cp-comm-type" in MEGATRON_LM_FLAGS
    assert not {"--context-parallel-size", "--transformer-impl"} & set(MEGATRON_LM_CONFIG_FLAGS)
    source = Path(sys.modules[TransformerConfig.__module__].__file__).read_text()
    assert '"p2p" or "all_gather" or "a2a" or "a2a+p2p"' in source
    TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4,
                      context_parallel_size=2, cp_comm_type="all_gather")


PARSE_CP = """
import json, sys, typing, warnings, argparse
warnings.filterwarnings("ignore")
if not hasattr(typing, "override"):
    import typing_extensions
    typing.override = typing_extensions.override
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
keys = ("context_parallel_size", "cp_comm_type", "transformer_impl", "attention_backend")
print(json.dumps([{k: str(getattr(parser.parse_args(a), k)) if k == "attention_backend"
                   else getattr(parser.parse_args(a), k) for k in keys}
                  for a in json.loads(sys.argv[1])]))
"""


def test_megatron_lms_own_parser_reads_the_cp_flags_after_the_base_args(mcore):  # noqa: F811
    """The layout's flags come after the user's, so they win: a base --cp-comm-type
    a2a+p2p and --context-parallel-size 8 give way to the layout's."""
    base = ["--context-parallel-size=8", "--cp-comm-type", "a2a+p2p", "--transformer-impl=local"]
    cases = [cp_layout(cp=cp, cp_comm_type=comm) for cp in (1, 2, 4) for comm in COMMS]
    spec = cp_spec(trainer="megatron-lm")
    rendered = [base + megatron_args("megatron-lm", spec, c) for c in cases]
    parsed_rows = parsed_in_child(PARSE_CP, rendered)
    for config, parsed in zip(cases, parsed_rows):
        assert parsed["context_parallel_size"] == config.cp
        if config.cp > 1:
            assert parsed["cp_comm_type"] == [MEGATRON_CP_COMM_TYPES[config.cp_comm_type]]
            assert parsed["transformer_impl"] == "transformer_engine"
        assert parsed["attention_backend"].endswith("flash")


PARSE_LAYOUT = PARSE_CP.replace(
    '"transformer_impl", "attention_backend")',
    '"transformer_impl", "attention_backend", "use_distributed_optimizer", '
    '"overlap_grad_reduce", "overlap_param_gather", "num_virtual_stages_per_pipeline_rank", '
    '"num_layers", "account_for_embedding_in_pipeline_split", '
    '"account_for_loss_in_pipeline_split")')


def test_the_llama3_example_renders_megatron_flags_for_its_published_layout(generated):  # noqa: F811
    """examples/llama3-405b-128k.yaml names Megatron-LM: the published layout (TP 8, CP 16
    all-gather, PP 16, 8 virtual stages, 126 layers split with the embedding and the loss
    counted as layers) and the plan's pick render, after the spec's own
    overlap flags, only flags that megatron-core's classes know, and Megatron-LM's own parser
    reads them as the layout and the spec say."""
    spec = load_spec(EXAMPLES / "llama3-405b-128k.yaml")
    published = Layout(tp=8, pp=16, dp=8, cp=16, cp_comm_type="allgather",
                               zero_stage=1, micro_batch_size=1, grad_accum_steps=16,
                               activation_checkpointing="full", sequence_parallel=True,
                               pp_schedule="interleaved", virtual_stages=8,
                               pipeline_split="embedding_loss")
    assert published in spec.search_space().candidates()
    base = list(spec.trial.megatron.args)
    pick = dataclasses.replace(published, cp=32, dp=4, grad_accum_steps=32, cp_comm_type="p2p",
                               activation_checkpointing="selective")
    rendered = [base + megatron_args("megatron-lm", spec, c) for c in (published, pick)]
    for args in rendered:
        assert problems(args, {**MEGATRON_LM_FLAGS, **generated}) == []
    for config, parsed in zip((published, pick), parsed_in_child(PARSE_LAYOUT, rendered)):
        assert parsed["context_parallel_size"] == config.cp
        assert parsed["cp_comm_type"] == [MEGATRON_CP_COMM_TYPES[config.cp_comm_type]]
        assert parsed["num_virtual_stages_per_pipeline_rank"] == 8
        assert parsed["use_distributed_optimizer"] and parsed["overlap_grad_reduce"]
        assert parsed["overlap_param_gather"]
        assert parsed["num_layers"] == 126  # Llama 3's own, the embedding and loss as layers
        assert parsed["account_for_embedding_in_pipeline_split"]
        assert parsed["account_for_loss_in_pipeline_split"]


def test_megatron_cores_local_attention_refuses_cp(mcore):  # noqa: F811
    """Why cp > 1 renders TransformerEngine's attention: the local one asserts."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4,
                               context_parallel_size=2, use_cpu_initialization=True)
    with pytest.raises(AssertionError, match="only supported by TEDotProductAttention"):
        DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal,
                            attention_type="self")


def test_megatron_lm_refuses_cp_it_cannot_run():
    cpu = cp_spec(trainer="megatron-lm", cluster={"preset": "h100-80g", "device": "cpu"})
    assert "space.cp [1]" in one_line_refusal(cpu, cp_layout(), KEPT)
    unfused = cp_spec(trainer="megatron-lm", trial={"flash_attention": False})
    assert "set trial.flash_attention to true" in one_line_refusal(unfused, cp_layout(), KEPT)
    # tp 4 leaves 2 key/value heads per rank: a2a over cp 4 cannot split them.
    reason = one_line_refusal(cp_spec(trainer="megatron-lm"),
                              cp_layout(tp=4, cp=4, cp_comm_type="a2a"), KEPT)
    assert reason.startswith("megatron-lm: cp(4) with cp_comm_type a2a splits the 2 key/value")
    assert "use p2p or allgather" in reason
    with pytest.raises(SpecError, match=r"space.configs\[0\]: megatron-lm: cp\(2\) with trial"):
        cp_spec(trainer="megatron-lm", space={"kind": "list", "configs": [{"tp": 2, "cp": 2}]},
                trial={"flash_attention": False})
    spec = cp_spec(trainer="megatron-lm",
                   space={"tp": [2], "pp": [1], "cp": [2], "zero_stage": [1],
                          "micro_batch_size": [1]}, trial={"flash_attention": False})
    with pytest.raises(SpecError, match="holds no layout trainer megatron-lm can run: megatron"):
        spec.candidates()


# --- Megatron-DeepSpeed ----------------------------------------------------------------------

def test_megatron_deepspeed_renders_ulysses_and_refuses_what_it_cannot():
    spec = cp_spec(trainer="megatron-deepspeed",
                   space={"cp": [1, 2], "tp": [1, 2], "sequence_parallel": [True, False]})
    assert spec.space.cp_comm_type == ["a2a"]  # its one comm type, by default
    refused: list[str] = []
    kept = runnable(spec, spec.search_space().candidates(), refused)
    assert all(not (c.cp > 1 and c.sequence_parallel) for c in kept)
    assert any(c.cp == 2 for c in kept)
    assert any("not compatible with Megatron-LM's sequence parallel" in r for r in refused)
    for config in kept:
        args = megatron_args("megatron-deepspeed", spec, config)
        assert problems(args, MEGATRON_DEEPSPEED_FLAGS) == []
        assert f"--ds-sequence-parallel-size={config.cp}" in args
    with pytest.raises(SpecError, match=r"space.cp_comm_type: megatron-deepspeed cannot run "
                                        r"p2p \(its context parallelism is DeepSpeed-Ulysses"):
        cp_spec(trainer="megatron-deepspeed", space={"cp": [1, 2], "cp_comm_type": ["p2p", "a2a"]})
    reason = one_line_refusal(spec, cp_layout(tp=8, cp=2, cp_comm_type="a2a"), KEPT)
    assert "exceeds the 1 key/value heads of a tp rank" in reason


# --- torchtitan ------------------------------------------------------------------------------

def test_torchtitan_cp_is_what_torchtitan_parses(parse):  # noqa: F811
    spec = cp_spec(trainer="torchtitan", space={"cp": [1, 2, 4]})
    assert spec.space.cp_comm_type == ["allgather"]  # its one comm type, by default
    for cp in (1, 2, 4):
        config = cp_layout(cp=cp, cp_comm_type="allgather", zero_stage=3)
        cfg = parse(["--module", "llama3", "--config", "llama3_8b", *layout_args(spec, config)])
        p = cfg.parallelism
        assert p.context_parallel_degree == cp and p.context_parallel_load_balancer == "headtail"
        assert (p.tensor_parallel_degree * p.data_parallel_shard_degree
                * p.data_parallel_replicate_degree * cp) == 16
    assert "--parallelism.context-parallel-load-balancer=headtail" not in layout_args(
        spec, cp_layout(cp=1))


def test_torchtitan_runs_allgather_only_and_says_so():
    """torchtitan sets no rotate method, so torch's context_parallel keeps its all-gather."""
    import torchtitan
    from torch.distributed.tensor.experimental._attention import _cp_options

    assert _cp_options.rotate_method.name == "ALL_GATHER"
    package = Path(torchtitan.__file__).parent
    assert not [p for p in package.rglob("*.py") if "set_rotate_method" in p.read_text()]
    with pytest.raises(SpecError, match=r"space.cp_comm_type: torchtitan cannot run p2p .*; "
                                        r"use \[allgather\]"):
        cp_spec(trainer="torchtitan", space={"cp": [2], "cp_comm_type": ["p2p"]})
    reason = one_line_refusal(cp_spec(trainer="torchtitan"), cp_layout(cp=2, cp_comm_type="a2a"),
                              KEPT)
    assert reason.startswith("torchtitan: cp_comm_type a2a: torchtitan 0.3 all-gathers")
    odd = cp_spec(trainer="torchtitan", model={**LLAMA_LONG, "seq_len": 32764})
    reason = one_line_refusal(odd, cp_layout(cp=2, cp_comm_type="allgather",
                                          sequence_parallel=True), KEPT)
    assert reason.startswith("torchtitan: seq_len(32764) must divide by 8")


def test_torchtitan_varlen_configs_refuse_cp_in_torchtitans_words():
    import torch.nn as nn
    from torchtitan.distributed.full_dtensor import validate_config
    from torchtitan.models.common.attention import VarlenAttention

    varlen = VarlenAttention.__new__(VarlenAttention)
    nn.Module.__init__(varlen)
    dims = type("Dims", (), {"cp_enabled": True, "spmd_backend": "spmd_types"})()
    with pytest.raises(NotImplementedError) as caught:
        validate_config(dims, nn.ModuleList([varlen]))
    assert str(caught.value) in VARLEN_CP
    with pytest.raises(SpecError, match="trial.torchtitan.config: torchtitan's gpt_oss "
                                        "gpt_oss_20b uses variable-length attention"):
        cp_spec(trainer="torchtitan", space={"cp": [1, 2]},
                trial={"torchtitan": {"module": "gpt_oss", "config": "gpt_oss_20b"}})
    checked = 0
    for module, name, config in torchtitan_registry_configs():
        listed = name in TORCHTITAN_VARLEN_CONFIGS.get(module, ())
        assert listed == ("VarlenAttention" in repr(config.model_spec)), (module, name)
        checked += 1
    assert checked >= 25


# --- DeepSpeed and commands ------------------------------------------------------------------

DS_SECTION = {"script": "train.py", "args": ["--sp", "{cp}", "--sp-comm={cp_comm_type}"]}


def test_cp_reaches_a_deepspeed_script_and_its_config(tmp_path, monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    spec = cp_spec(trainer="deepspeed",
                   space={"tp": [1], "pp": [1], "cp": [1, 2], "zero_stage": [1]},
                   trial={"deepspeed": DS_SECTION})
    assert spec.space.cp_comm_type == ["a2a"]
    import deepspeed.runtime.config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: spec.world_size)
    for config in spec.candidates():
        run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), 3)
        assert run.program[1:4] == ["--sp", str(config.cp), f"--sp-comm={config.cp_comm_type}"]
        written = json.loads(run.files[DEEPSPEED_CONFIG_FILE])
        assert written.get("sequence_parallel_size", 1) == config.cp
        loaded = ds_config.DeepSpeedConfig(written)  # the batch checks out over world / cp
        assert loaded.world_size == config.dp and loaded.train_batch_size == 16
        if config.cp > 1:
            assert "sequence_parallel_size: (unset) -> 2 (the layout's cp" in \
                run.files[DEEPSPEED_CHANGES_FILE]
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        ds_config.DeepSpeedConfig({k: v for k, v in deepspeed_config(
            spec, cp_layout(tp=1)).items() if k != "sequence_parallel_size"})


def test_deepspeed_refuses_what_ulysses_cannot_run():
    with pytest.raises(SpecError, match=r"space.cp: trial.deepspeed.args hold no \{cp\}"):
        cp_spec(trainer="deepspeed", space={"cp": [1, 2]},
                trial={"deepspeed": {"script": "train.py"}})
    with pytest.raises(SpecError, match=r"space.cp_comm_type: deepspeed cannot run allgather .*"
                                        r"DistributedAttention"):
        cp_spec(trainer="deepspeed", space={"cp": [2], "cp_comm_type": ["allgather"]},
                trial={"deepspeed": DS_SECTION})
    with pytest.raises(SpecError, match=r"space.configs\[0\]: deepspeed: cp_comm_type p2p: "
                                        r".*set space.cp_comm_type to \[a2a\]"):
        cp_spec(trainer="deepspeed", space={"kind": "list", "configs": [{"tp": 1, "cp": 2}]},
                trial={"deepspeed": DS_SECTION})


def test_a_command_sees_cp_or_has_it_pinned(tmp_path, caplog):
    forget()
    space = {"tp": [1], "pp": [1], "cp": [1, 2], "cp_comm_type": ["a2a", "p2p"],
             "zero_stage": [0]}
    spec = cp_spec(trainer="command", space=space,
                   trial={"command": ["train.py", "--cp={cp}", "{cp_comm_type}"]})
    seen = {(c.cp, c.cp_comm_type) for c in spec.candidates()}
    assert seen == {(1, "a2a"), (2, "a2a"), (2, "p2p")}
    for config in spec.candidates():
        run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), 3)
        assert run.program[1:3] == [f"--cp={config.cp}", config.cp_comm_type]
    blind = cp_spec(trainer="command", space=space,
                    trial={"command": ["train.py", "--steps", "{steps}"]})
    assert blind.space.cp == [1] and {c.cp for c in blind.candidates()} == {1}
    assert "space.cp: trial.command holds none of {cp}, {dp}" in caplog.text


# --- exports ---------------------------------------------------------------------------------

def test_a_megatron_cp_campaigns_exports_name_its_context_parallel_layout(runs_dir, monkeypatch):
    """examples/megatron-long-context.yaml, rehearsed with cp 2 or 4: the winner's launch files
    in every format of its program carry the layout's context parallelism."""
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "megatron-long-context.yaml", [
        "budget.max_trials=4", "tracking.enabled=false", "space.cp=[2, 4]", "space.tp=[2]",
        "space.activation_checkpointing=[full]"])
    view, best = run_and_best(spec)
    config = best.config
    flags = [f"--context-parallel-size={config.cp}", "--transformer-impl=transformer_engine",
             f"--cp-comm-type={MEGATRON_CP_COMM_TYPES[config.cp_comm_type]}"]
    for fmt in ("megatron-lm", "torchrun", "sbatch"):
        text = export(fmt, spec, best.trial_id, config, view.trial_dir(best.trial_id))
        assert all(flag in text for flag in flags), (fmt, text)
        assert fmt == "megatron-lm" or "CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    ds = export("megatron-deepspeed", spec, best.trial_id, config.__class__(
        **{**config.to_dict(), "cp_comm_type": "a2a", "sequence_parallel": False}))
    assert f"--ds-sequence-parallel-size={config.cp}" in ds
    titan = config.__class__(**{**config.to_dict(), "cp_comm_type": "allgather"})
    text = export("torchtitan", spec, best.trial_id, titan)
    assert f"--parallelism.context-parallel-degree={config.cp}" in text
    assert "--parallelism.context-parallel-load-balancer=headtail" in text


def test_a_torchtitan_cp_campaigns_exports_carry_cp(runs_dir, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "torchtitan.yaml", [
        "backend.kind=simulated", "budget.max_trials=3", "tracking.enabled=false",
        "space.cp=[2]", "space.tp=[2]", "space.zero_stage=[3]"])
    view, best = run_and_best(spec)
    assert (best.config.cp, best.config.cp_comm_type) == (2, "allgather")
    for fmt in ("torchtitan", "torchrun", "sbatch"):
        text = export(fmt, spec, best.trial_id, best.config, view.trial_dir(best.trial_id))
        assert "--parallelism.context-parallel-degree=2" in text, (fmt, text)
        assert "--parallelism.context-parallel-load-balancer=headtail" in text


def test_a_builtin_cp_campaigns_exports_carry_cp_and_others_refuse_in_one_line(runs_dir):
    spec = spec_from_dict({
        "name": "cp-builtin", "model": "tiny", "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 4},
        "space": {"cp": [2], "cp_comm_type": ["p2p"], "zero_stage": [0],
                  "micro_batch_size": [2], "activation_checkpointing": ["none"]},
        "backend": {"kind": "simulated"}, "tracking": {"enabled": False}})
    _, best = run_and_best(spec)
    assert (best.config.cp, best.config.cp_comm_type) == (2, "p2p")
    for fmt in ("torchrun", "sbatch"):
        text = export(fmt, spec, best.trial_id, best.config)
        assert "--cp 2" in text and "--cp-comm-type p2p" in text
    assert "cp: 2" in export("yaml", spec, best.trial_id, best.config)
    with pytest.raises(SpecError) as caught:
        export("torchtitan", spec, best.trial_id, best.config)
    assert "cp_comm_type p2p" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(SpecError, match="--format megatron-lm: .*TransformerEngine"):
        export("megatron-lm", spec, best.trial_id, best.config)  # a CPU cluster
