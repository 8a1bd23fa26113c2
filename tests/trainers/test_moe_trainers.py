"""Mixture-of-experts layouts in every trainer: the flags each renders, checked against the
tool's own classes and parsers (megatron-core 0.19.2's config dataclasses and Megatron-LM's
parser, the Megatron-DeepSpeed parser table, torchtitan's config manager); the layouts each
refuses, with its reason; `{ep}`/`{etp}` for scripts; exports that name the expert layout.

Megatron-Core's MoE layer does not step on a CPU: megatron-core 0.19.2's all-to-all token
dispatcher makes a CUDA stream when it is built (moe/token_dispatcher.py:
`MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = torch.cuda.Stream()` -> "RuntimeError:
torch.cuda.Stream requires CUDA support"), and with the all-gather dispatcher the router moves
its CPU weight to the GPU at its first forward (moe/router.py, TopKRouter.gating:
`self.weight.data.to(device=torch.cuda.current_device())` -> "AssertionError: Torch not
compiled with CUDA enabled"), so no real Megatron-Core MoE trial runs here;
`test_megatron_core_moe_still_needs_a_gpu` says so when that changes.
"""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
import types
import typing
import warnings
from functools import partial

import pytest
from builders import layout, make_spec
from conftest import EXAMPLES
from trainer_checks import parsed_in_child, run_and_best

from orchestrator.common.errors import SpecError
from orchestrator.common.placeholders import PLACEHOLDERS
from orchestrator.export import export
from orchestrator.campaign_spec import load_spec, spec_from_dict
from orchestrator.campaign_spec.trainer_layouts import runnable
from orchestrator.trainers import trainer_for
from orchestrator.trainers.megatron import megatron_args
from orchestrator.trainers.megatron.flags import (
    MEGATRON_LM_CONFIG_FLAGS,
    MEGATRON_LM_FLAGS,
    Flag,
    problems,
)
from orchestrator.trainers.megatron.moe import moe_layer_pattern
from orchestrator.trial.folder import TrialFolder

MISSING = ("megatron-core 0.19.2 is not installed (pip install --no-deps "
           "--ignore-requires-python megatron-core==0.19.2: it declares Python >= 3.12 and "
           "imports on 3.11)")


@pytest.fixture(scope="module")
def mcore():
    """megatron-core's package; its tests are skipped, saying how to install it, without it."""
    return pytest.importorskip("megatron.core", reason=MISSING)

GPT_MOE = {"name": "gpt-moe", "num_layers": 8, "hidden": 1024, "num_heads": 16,
           "ffn_hidden": 4096, "vocab_size": 51200, "seq_len": 2048, "gated_mlp": False,
           "tied_embeddings": True, "num_experts": 8, "experts_per_token": 2}
# (model, layout fields); 64 ranks = tp x pp x dp
MOE_LAYOUTS = [
    ("mixtral-8x7b", {"tp": 2, "pp": 2, "dp": 16, "ep": 4, "sequence_parallel": True}),
    ("qwen3-30b-a3b", {"tp": 1, "pp": 2, "dp": 32, "ep": 8, "etp": 1}),
    ("qwen2-57b-a14b", {"tp": 4, "pp": 1, "dp": 16, "ep": 8, "etp": 2,
                        "sequence_parallel": True}),
    ("deepseek-v3-671b", {"tp": 8, "pp": 1, "dp": 8, "ep": 8, "etp": 1, "sequence_parallel": True}),
    (GPT_MOE, {"tp": 2, "pp": 1, "dp": 32, "ep": 8, "etp": 1, "sequence_parallel": True}),
]


# Eight nodes, a global batch of 256 sequences.
eight_node_spec = partial(make_spec,
                          {"name": "moe", "scale": {"nodes": 8, "global_batch_size": 256}})


def _excluded_from_generation(mcore) -> set[str]:
    """The TransformerConfig fields Megatron-LM does not turn into flags: the `exclude` list of
    `_add_network_size_args`, read from the installed megatron/training/arguments.py."""
    import ast
    from pathlib import Path

    source = Path(mcore.__file__).parent.parent / "training" / "arguments.py"
    tree = ast.parse(source.read_text())
    function = next(n for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef) and n.name == "_add_network_size_args")
    assign = next(n for n in function.body if isinstance(n, ast.Assign))
    return {item.value for item in assign.value.elts}


def _kind(field: dataclasses.Field) -> tuple[list[str], Flag]:
    """A field's flag names and kind, as megatron/training/argument_utils.py's
    ArgumentGroupFactory derives them."""
    names, kind = ["--" + field.name.replace("_", "-")], field.type
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # Optional[X] is X
        kind = typing.get_args(kind)[0]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):  # given by member name
        flag = Flag(choices=tuple(member.name for member in kind))
    elif kind is bool:
        if field.default is True:
            names = [n.replace("--", "--no-", 1) for n in names] + \
                    [n.replace("--", "--disable-", 1) for n in names]
        flag = Flag(store_true=True)
    elif typing.get_origin(kind) is typing.Literal:
        flag = Flag(type=type(typing.get_args(kind)[0]), choices=typing.get_args(kind))
    else:
        flag = Flag(type=kind if isinstance(kind, type) else str)
    meta = field.metadata.get("argparse_meta", {})
    return meta.get("arg_names", names), Flag(flag.store_true, meta.get("type", flag.type),
                                              tuple(meta.get("choices", flag.choices)))


@pytest.fixture(scope="module")
def generated(mcore) -> dict[str, Flag]:
    """Megatron-LM's flags generated from the installed TransformerConfig (ModelParallelConfig's
    fields included)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    excluded = _excluded_from_generation(mcore)
    flags: dict[str, Flag] = {}
    for field in dataclasses.fields(TransformerConfig):
        if field.init and field.name not in excluded:
            names, flag = _kind(field)
            flags.update(dict.fromkeys(names, flag))
    return flags


def test_megatron_core_is_the_release_read(mcore, generated):
    assert mcore.__version__.startswith("0.19.")
    assert set(MEGATRON_LM_CONFIG_FLAGS) <= set(generated)
    assert not set(MEGATRON_LM_CONFIG_FLAGS) & set(MEGATRON_LM_FLAGS)  # classes, not the table
    assert "--num-experts" not in generated and "--moe-layer-freq" not in generated
    for name in ("--num-experts", "--moe-layer-freq"):  # written by hand: in the table
        assert name in MEGATRON_LM_FLAGS


def test_table_flags_megatron_core_now_generates_agree_with_its_classes(generated):
    """The table was read at an older commit; where megatron-core now generates a flag, its
    switch-or-value, type and (where the class restricts them) choices still match."""
    drift = [name for name, flag in MEGATRON_LM_FLAGS.items() if name in generated
             and (flag.store_true, flag.type) != (generated[name].store_true,
                                                  generated[name].type)]
    assert drift == []
    narrower = [name for name, flag in MEGATRON_LM_FLAGS.items() if name in generated
                and generated[name].choices and set(flag.choices) - set(generated[name].choices)]
    assert narrower == []


@pytest.mark.parametrize("model,fields", MOE_LAYOUTS, ids=lambda v: str(v)[:20])
def test_megatron_lm_moe_flags_are_megatron_cores(model, fields, generated, tmp_path):
    spec = eight_node_spec(trainer="megatron-lm", model=model,
                           trial={"megatron": {"args": ["--mock-data"]}})
    config = layout(batch=256, **fields)
    args = megatron_args("megatron-lm", spec, config)
    assert problems(args, {**MEGATRON_LM_FLAGS, **generated}) == []
    assert [a for a in args if a.split("=")[0] in MEGATRON_LM_CONFIG_FLAGS]
    m = spec.model
    assert f"--num-experts={m.num_experts}" in args
    assert f"--moe-router-topk={m.experts_per_token}" in args
    assert f"--expert-model-parallel-size={config.ep}" in args
    assert f"--expert-tensor-parallel-size={config.etp or config.tp}" in args
    assert ("--moe-grouped-gemm" in args) and "--moe-token-dispatcher-type=alltoall" in args
    assert (f"--kv-channels={m.kv_channels}" in args) == (m.kv_channels is not None)
    shared = f"--moe-shared-expert-intermediate-size={m.shared_expert_ffn_hidden}"
    assert (shared in args) == bool(m.shared_expert_ffn_hidden)
    run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), steps=5)
    assert run.program[1:2 + len(args)] == ["--mock-data", *args]


PARSE_WITH_MEGATRON_LM = """
import json, sys, typing, warnings, argparse
warnings.filterwarnings("ignore")
if not hasattr(typing, "override"):  # megatron/training imports typing.override (Python 3.12)
    import typing_extensions
    typing.override = typing_extensions.override
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
keys = ("num_experts", "moe_router_topk", "moe_layer_freq", "expert_model_parallel_size",
        "expert_tensor_parallel_size", "moe_token_dispatcher_type", "moe_grouped_gemm",
        "kv_channels", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
        "sequence_parallel")
print(json.dumps([{k: getattr(parser.parse_args(a), k) for k in keys}
                  for a in json.loads(sys.argv[1])]))
"""


def test_megatron_lms_own_parser_reads_the_moe_flags(mcore):
    """Megatron-LM's parser as megatron-core 0.19.2 ships it (megatron/training), in a child
    process: every rendered flag parses, to the model's and the layout's values."""
    cases = [(eight_node_spec(trainer="megatron-lm", model=model), layout(batch=256, **fields))
             for model, fields in MOE_LAYOUTS]
    rendered = [megatron_args("megatron-lm", spec, config) for spec, config in cases]
    parsed_rows = parsed_in_child(PARSE_WITH_MEGATRON_LM, rendered)
    for (spec, config), parsed in zip(cases, parsed_rows):
        m = spec.model
        freq = parsed["moe_layer_freq"]
        pattern = [int(i % freq == 0) for i in range(m.num_layers)] if isinstance(freq, int) \
            else freq
        assert pattern == moe_layer_pattern(m) and sum(pattern) == m.moe_layers
        assert (parsed["num_experts"], parsed["moe_router_topk"]) == (m.num_experts,
                                                                      m.experts_per_token)
        assert parsed["moe_ffn_hidden_size"] == m.expert_ffn_hidden
        assert (parsed["moe_shared_expert_intermediate_size"] or 0) == m.shared_expert_ffn_hidden
        assert parsed["expert_model_parallel_size"] == config.ep
        assert parsed["expert_tensor_parallel_size"] == (config.etp or config.tp)
        assert parsed["moe_token_dispatcher_type"] == "alltoall" and parsed["moe_grouped_gemm"]
        assert parsed["kv_channels"] == m.kv_channels


def test_megatron_lm_refuses_what_megatron_core_refuses(mcore):
    """The two layout rules, as megatron-core 0.19.2's own classes state them, and the
    layouts the megatron-lm trainer drops for them."""
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ModelParallelConfig(tensor_model_parallel_size=2, expert_model_parallel_size=2)
    assert any("sequence parallelism must be used" in str(w.message) for w in seen)
    with pytest.raises(AssertionError, match="Bias in Moe is only supported when ETP==1"):
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=8,
                          add_bias_linear=True, tensor_model_parallel_size=2,
                          expert_tensor_parallel_size=2, sequence_parallel=True)
    spec = eight_node_spec(trainer="megatron-lm", model=GPT_MOE,
                           space={"tp": [1, 2], "pp": [1], "ep": [1, 8], "etp": [None, 1],
                                  "sequence_parallel": [True, False], "zero_stage": [1],
                                  "micro_batch_size": [1]})
    found = spec.search_space().candidates()
    refused: list[str] = []
    kept = runnable(spec, found, refused)
    assert all(c.sequence_parallel or c.tp == 1 or c.ep == 1 for c in kept)
    assert all((c.etp or c.tp) == 1 for c in kept) and spec.candidates() == kept
    assert any("needs sequence_parallel" in r for r in refused)
    assert any("Bias in Moe is only supported when ETP==1" in r for r in refused)
    with pytest.raises(SpecError, match="space.configs\\[0\\]: megatron-lm: ep\\(8\\) with tp"):
        eight_node_spec(trainer="megatron-lm", model="mixtral-8x7b",
                        space={"kind": "list",
                               "configs": [{"tp": 2, "ep": 8, "micro_batch_size": 1}]})


def test_megatron_core_moe_still_needs_a_gpu(mcore, tmp_path):
    """Build Megatron-Core's MoE layer on CPU and step it; it stops where the docstring says.
    Should it train here one day, this fails: add a real Megatron-Core MoE trial then."""
    script = """
import sys, warnings; warnings.filterwarnings("ignore")
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel()
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, num_moe_experts=4,
    moe_router_topk=2, moe_token_dispatcher_type="allgather", use_cpu_initialization=True,
    add_bias_linear=False, gradient_accumulation_fusion=False)
moe = get_gpt_layer_local_spec(num_experts=4, moe_grouped_gemm=False).submodules.mlp(config=config)
moe.set_layer_number(1)
output = moe(torch.randn(8, 2, 64))
(output[0] if isinstance(output, tuple) else output).pow(2).mean().backward()
print("stepped")
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "rendezvous")],
                          capture_output=True, text=True, timeout=600)
    assert "stepped" not in done.stdout, "Megatron-Core's MoE steps on CPU now"
    assert "Torch not compiled with CUDA enabled" in done.stderr, done.stderr[-2000:]
    assert "router.py" in done.stderr


# --- scripts: {ep} and {etp} -------------------------------------------------------------

def _command_spec(command, ep=(1, 2), etp=(None,)):
    return spec_from_dict({
        "name": "moe-cmd", "model": "tiny-moe", "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 4, "global_batch_size": 8},
        "space": {"tp": [1, 2], "ep": list(ep), "etp": list(etp), "micro_batch_size": [2],
                  "zero_stage": [0], "activation_checkpointing": ["none"]},
        "trial": {"trainer": "command", "command": command}})


def test_ep_and_etp_reach_a_command_and_etp_unset_is_tps(tmp_path):
    assert {"ep", "etp"} <= set(PLACEHOLDERS)
    spec = _command_spec(["train.py", "--ep", "{ep}", "--etp={etp}"], etp=(None, 1))
    seen = set()
    for config in spec.candidates():
        run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), 3)
        assert run.program[1:3] == ["--ep", str(config.ep)]
        assert run.program[3] == f"--etp={config.etp or config.tp}"  # never an empty word
        seen.add((config.ep, config.etp))
    assert {ep for ep, _ in seen} == {1, 2} and {etp for _, etp in seen} == {None, 1}


def test_a_command_without_ep_has_ep_pinned_with_the_reason(caplog):
    spec = _command_spec(["train.py", "--tp", "{tp}"])
    assert spec.space.ep == [1] and {c.ep for c in spec.candidates()} == {1}
    assert "space.ep: trial.command holds none of {ep}" in caplog.text


def test_a_deepspeed_script_that_takes_no_ep_is_refused():
    section = {"script": "train_moe.py", "args": ["--steps", "{total_steps}"]}
    with pytest.raises(SpecError, match=r"space.ep: trial.deepspeed.args hold no \{ep\}"):
        eight_node_spec(trainer="deepspeed", model="tiny-moe", space={"ep": [1, 2]},
                        trial={"deepspeed": section})
    section["args"] += ["--ep", "{ep}"]
    spec = eight_node_spec(trainer="deepspeed", model="tiny-moe",
                           space={"ep": [1, 2], "tp": [1], "pp": [1]}, trial={"deepspeed": section})
    assert {c.ep for c in spec.candidates()} == {1, 2}


# --- exports -----------------------------------------------------------------------------

def test_a_megatron_moe_campaigns_exports_name_its_expert_layout(runs_dir, monkeypatch):
    """examples/megatron-moe.yaml, rehearsed: the winner's launch files in every format of its
    program carry its experts and their layout, as the trials rendered them."""
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "megatron-moe.yaml", ["budget.max_trials=6",
                                                      "tracking.enabled=false"])
    view, best = run_and_best(spec)
    config = best.config
    flags = ["--num-experts=8", "--moe-router-topk=2", f"--expert-model-parallel-size={config.ep}",
             f"--expert-tensor-parallel-size={config.etp or config.tp}",
             "--moe-token-dispatcher-type=alltoall"]
    for fmt in ("megatron-lm", "torchrun", "sbatch"):
        text = export(fmt, spec, best.trial_id, config, view.trial_dir(best.trial_id))
        assert all(flag in text for flag in flags), (fmt, text)
        assert "pretrain_gpt.py" in text or fmt == "megatron-lm"


def test_a_builtin_moe_campaigns_exports_carry_ep(runs_dir):
    spec = spec_from_dict({
        "name": "moe-builtin", "model": "tiny-moe", "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "space": {"ep": [2], "zero_stage": [0], "micro_batch_size": [2],
                  "activation_checkpointing": ["none"]},
        "backend": {"kind": "simulated"}, "tracking": {"enabled": False}})
    _, best = run_and_best(spec)
    assert best.config.ep == 2
    for fmt in ("torchrun", "sbatch"):
        assert "--ep 2" in export(fmt, spec, best.trial_id, best.config)
    assert "ep: 2" in export("yaml", spec, best.trial_id, best.config)
    megatron = export("megatron-lm", spec, best.trial_id, best.config)
    assert "--expert-model-parallel-size=2" in megatron and "--num-experts=8" in megatron
    deepspeed = export("megatron-deepspeed", spec, best.trial_id, best.config)
    assert "--moe-expert-parallel-size=2" in deepspeed  # its experts are its MLP, 344 wide
    assert "--ffn-hidden-size=344" in deepspeed and "--num-experts=8" in deepspeed


def test_group_limited_routing_reaches_megatron_and_is_refused_where_it_cannot_run():
    from orchestrator.trainers.megatron.moe import moe_args

    spec = load_spec(EXAMPLES / "deepseek-v3.yaml")
    config = spec.candidates()[0]
    args = moe_args("megatron-lm", spec, config)
    assert "--moe-router-num-groups=8" in args and "--moe-router-group-topk=4" in args
    assert not any(a.startswith("--moe-token-dispatcher-type") for a in args)  # the user's flex
    with pytest.raises(SpecError, match=r"model\.moe_router_num_groups: the built-in trainer"):
        load_spec(EXAMPLES / "deepseek-v3.yaml", ["trial.trainer=builtin", "trial.megatron=null"])
