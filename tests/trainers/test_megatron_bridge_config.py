"""The overrides a layout renders land in Megatron-Bridge's own config classes (megatron-bridge
0.6.2 with megatron-core 0.19.2).

Two checks. In the suite's own venv, where Bridge does not import (its package __init__
imports every Hugging Face model bridge, and megatron/training/models/gpt.py uses Python 3.12's
`typing.override`), each override key is checked against the installed source, read with `ast`
(ConfigContainer's sections in megatron/bridge/training/config.py, Bridge's dataclasses,
megatron/training/config's), and the values are built into the Megatron-Core configs that hold
them, so their own `__post_init__` checks run. Then Bridge itself, imported in a subprocess
from the trainer's import site (orchestrator/trainers/megatron_bridge/
requirements-import-site.txt, built by `make install`; bridge_applies_overrides.py stands in
typing.override and the CUDA-only Transformer Engine): its `process_config_with_overrides`
applies the overrides to a recipe and its `runtime_config_update` validates them.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from orchestrator.space import Layout
from orchestrator.export import export
from orchestrator.campaign_spec import load_spec, spec_from_dict
from orchestrator.trainers.megatron_bridge.overrides import MIXED_PRECISION, bridge_overrides

NOT_INSTALLED = ("megatron-bridge is not installed: `pip install --no-deps "
                 "--ignore-requires-python megatron-bridge==0.6.2` (the Makefile does)")


def package_dir(name: str) -> Path | None:
    found = importlib.util.find_spec(name)  # finds the package without running its __init__
    return Path(found.submodule_search_locations[0]) if found else None


BRIDGE = package_dir("megatron.bridge")
TRAINING = package_dir("megatron.training")
pytestmark = pytest.mark.skipif(BRIDGE is None or TRAINING is None, reason=NOT_INSTALLED)

# World 16 = 2 nodes x 8, global batch 128; each layout renders a different part.
LAYOUTS = {
    "interleaved cp fp8": {"tp": 2, "pp": 2, "cp": 2, "dp": 2, "zero_stage": 1,
                           "micro_batch_size": 1, "grad_accum_steps": 64,
                           "activation_checkpointing": "full", "recompute_num_layers": 2,
                           "sequence_parallel": True, "pp_schedule": "interleaved",
                           "virtual_stages": 2, "precision": "fp8-tensorwise",
                           "overlap_comm": True, "bucket_size": 100_000_000},
    "ddp selective split": {"tp": 4, "pp": 2, "dp": 2, "zero_stage": 0, "micro_batch_size": 2,
                            "grad_accum_steps": 32, "activation_checkpointing": "selective",
                            "pipeline_split": "embedding_loss", "overlap_comm": False},
    "offload first_last": {"tp": 1, "pp": 2, "dp": 8, "zero_stage": 1, "micro_batch_size": 1,
                           "grad_accum_steps": 16, "activation_checkpointing": "full",
                           "pipeline_split": "first_last", "offload": "optimizer",
                           "precision": "fp8-blockwise"},
}
MOE = {"preset": "llama-3.1-8b", "num_experts": 8, "experts_per_token": 2,
       "moe_ffn_hidden": 4096, "first_dense_layers": 1}
MOE_LAYOUT = {"tp": 2, "pp": 1, "dp": 8, "ep": 4, "zero_stage": 1, "micro_batch_size": 1,
              "grad_accum_steps": 16, "sequence_parallel": True}


def spec(model="llama-3.1-8b"):
    return spec_from_dict({
        "name": "bridge", "model": model, "cluster": "h100-80g",
        "scale": {"nodes": 2, "gpus_per_node": 8, "global_batch_size": 128},
        "space": {"zero_stage": [0, 1]}, "trial": {"trainer": "megatron-bridge"},
        "tracking": {"enabled": False}})


def rendered() -> list[tuple[str, Layout, dict]]:
    """(what, layout, {key: value as Hydra reads it}) for every layout above and the MoE one."""
    cases = [(what, spec(), Layout(**fields)) for what, fields in LAYOUTS.items()]
    cases.append(("moe", spec(MOE), Layout(**MOE_LAYOUT)))
    out = []
    for what, s, config in cases:
        words = bridge_overrides(s, config)
        out.append((what, config, {k: yaml.safe_load(v) for k, v in
                                   (w.split("=", 1) for w in words)}))
    return out


def classes_in(path: Path) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}


def annotated(cls: ast.ClassDef) -> dict[str, str]:
    """A dataclass's own fields, with their annotations as written."""
    return {n.target.id: ast.unparse(n.annotation) for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def mcore():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no Transformer Engine or Apex here
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.transformer.transformer_config import TransformerConfig
    return TransformerConfig, OptimizerConfig, DistributedDataParallelConfig


def section_fields() -> dict[str, set[str]]:
    """Each ConfigContainer section the overrides name, and every field its class has: the
    class is the one ConfigContainer declares, its fields its own and its bases'."""
    transformer, optimizer, ddp = mcore()
    bridge = classes_in(BRIDGE / "training" / "config.py")
    training = classes_in(TRAINING / "config" / "training_config.py")
    container = annotated(bridge["ConfigContainer"])
    assert "GPTModelProvider" in container["model"]
    provider = classes_in(BRIDGE / "models" / "gpt_provider.py")["GPTModelProvider"]
    assert [ast.unparse(b).split("[")[0] for b in provider.bases][0] == "TransformerConfig"
    bridge_transformer = classes_in(BRIDGE / "models" / "transformer_config.py")["TransformerConfig"]
    names = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
    sections = {
        "model": names(transformer) | set(annotated(provider)) | set(annotated(bridge_transformer)),
        "optimizer": names(optimizer) | set(annotated(bridge["OptimizerConfig"])),
        "ddp": names(ddp) | set(annotated(bridge["DistributedDataParallelConfig"])),
        "dataset": set(annotated(bridge["GPTDatasetConfig"])),
    }
    for section, cls in (("train", "TrainingConfig"), ("logger", "LoggerConfig"),
                         ("checkpoint", "CheckpointConfig"), ("validation", "ValidationConfig")):
        assert container[section].split(" ")[0] == cls  # e.g. `train: TrainingConfig`
        subclass = bridge.get(cls)  # Bridge subclasses all but ValidationConfig
        sections[section] = set(annotated(training[cls])) | set(annotated(subclass) if subclass else ())
    assert "MixedPrecisionConfig" in container["mixed_precision"] and "str" in container["mixed_precision"]
    return sections


def test_every_rendered_key_is_a_field_of_the_section_bridge_declares():
    sections = section_fields()
    from orchestrator.trainers.megatron_bridge.overrides import MEASUREMENT, TRIAL_ONLY

    trial_keys = {w.split("=", 1)[0] for w in (*MEASUREMENT, *TRIAL_ONLY, "train.train_iters=1")}
    for what, _config, overrides in rendered():
        for key in [*overrides, *trial_keys]:
            if key == "mixed_precision":
                continue
            section, _, leaf = key.partition(".")
            assert leaf in sections[section], f"{what}: {key} is no field of Bridge's {section}"


def recipes() -> dict[str, dict[str, object]]:
    """Each registered mixed-precision recipe (`@register` in mixed_precision.py) and what its
    body sets: `cfg.fp8_recipe = ...` etc., and the bf16 of bf16_mixed() it starts from."""
    tree = ast.parse((BRIDGE / "training" / "mixed_precision.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d) == "register" for d in node.decorator_list):
            sets = {t.attr: ast.literal_eval(n.value) for n in ast.walk(node)
                    if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Attribute) and isinstance(n.value, ast.Constant)}
            sets["from"] = next((ast.unparse(n.value.func) for n in ast.walk(node)
                                 if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)),
                                None)
            found[node.name] = sets
    return found


def test_each_precision_names_a_registered_recipe_of_its_fp8_recipe():
    registered = recipes()
    # ParaTune's precision -> the Transformer Engine recipe Megatron-Core's fp8_recipe names.
    expected = {"fp8-tensorwise": "tensorwise", "fp8-delayed": "delayed",
                "fp8-blockwise": "blockwise", "mxfp8": "mxfp8"}
    assert set(MIXED_PRECISION) == {"bf16", *expected}
    for precision, name in MIXED_PRECISION.items():
        assert name in registered, f"{precision}: {name} is not a registered recipe"
        body = registered[name]
        if precision == "bf16":
            assert "fp8_recipe" not in body and "fp8" not in body
        else:
            assert body["fp8_recipe"] == expected[precision]
            assert body["from"] == "bf16_mixed"  # bf16 outside the FP8 GEMMs


def values_of(overrides: dict, section: str, fields: set[str]) -> dict:
    return {k.split(".", 1)[1]: v for k, v in overrides.items()
            if k.startswith(section + ".") and k.split(".", 1)[1] in fields}


def test_the_values_land_in_megatron_cores_configs_and_pass_their_checks():
    import torch

    transformer, optimizer, ddp = mcore()
    # What bf16_mixed() sets on the model (mixed_precision.py; pp > 1 needs pipeline_dtype), and
    # what the Llama recipes' provider has from the Hugging Face config (SwiGLU, no biases).
    bf16 = {"bf16": True, "params_dtype": torch.bfloat16, "pipeline_dtype": torch.bfloat16,
            "gated_linear_unit": True}  # the overrides drop the biases
    for what, config, overrides in rendered():
        fields = {f.name for f in dataclasses.fields(transformer)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformer(**values_of(overrides, "model", fields), **bf16)
            opt = optimizer(**values_of(overrides, "optimizer", {f.name for f in dataclasses.fields(optimizer)}))
            grads = ddp(**values_of(overrides, "ddp", {f.name for f in dataclasses.fields(ddp)}))
        assert (model.tensor_model_parallel_size, model.pipeline_model_parallel_size,
                model.context_parallel_size, model.expert_model_parallel_size) == \
            (config.tp, config.pp, config.cp, config.ep), what
        assert model.virtual_pipeline_model_parallel_size == (
            config.virtual_stages if config.virtual_stages > 1 else None), what
        assert model.sequence_parallel == config.sequence_parallel, what
        assert model.recompute_granularity == {"none": None}.get(
            config.activation_checkpointing, config.activation_checkpointing), what
        assert opt.use_distributed_optimizer == grads.use_distributed_optimizer == \
            (config.zero_stage == 1), what
        assert opt.optimizer_cpu_offload == (config.offload == "optimizer"), what
        if config.overlap_comm is not None:
            assert grads.overlap_grad_reduce == config.overlap_comm, what
        assert grads.bucket_size == config.bucket_size, what
        assert (overrides["train.micro_batch_size"], overrides["train.global_batch_size"]) == \
            (config.micro_batch_size, config.global_batch_size()), what
        if config.ep > 1:
            assert (model.num_moe_experts, model.moe_router_topk) == (8, 2)
            assert model.moe_layer_freq == [0] + [1] * 31  # the first layer dense


SITE = Path(sys.prefix) / "trainer-sites" / "megatron_bridge"
ROOT = Path(__file__).resolve().parents[2]


def exported_launch_file():
    """examples/megatron-bridge.yaml's first layout, its `megatron-bridge` launch file's
    OVERRIDES as bash reads them, the spec and the layout."""
    example = load_spec(ROOT / "examples" / "megatron-bridge.yaml")
    layout = example.candidates()[0]
    script = export("megatron-bridge", example, "t0001", layout)
    array = script[script.index("OVERRIDES=("):script.index("\n)\n") + 2]
    words = subprocess.run(["bash", "-c", array + '\nprintf "%s\\0" "${OVERRIDES[@]}"'],
                           capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    return example, layout, words


@pytest.mark.skipif(not SITE.is_dir(), reason=f"{SITE} is missing: `make install` builds it "
                    "from orchestrator/trainers/megatron_bridge/requirements-import-site.txt")
def test_bridges_own_functions_apply_and_validate_the_overrides():
    """Bridge's own override function applies each layout's overrides to a recipe (the bare
    GPTModelProvider, which needs no Hugging Face download), and its own pre-training pass
    (`runtime_config_update`: mixed precision, data-parallel size, `ConfigContainer.validate`)
    accepts them at the layout's world size."""
    cases = [(what, config, spec(MOE) if what == "moe" else spec())
             for what, config, _ in rendered()]
    request = [{"what": what, "world_size": config.world_size,
                "overrides": bridge_overrides(s, config)} for what, config, s in cases]
    example, exported, launch_words = exported_launch_file()
    request.append({"what": "exported", "world_size": exported.world_size,
                    "overrides": launch_words})
    done = subprocess.run([sys.executable, str(Path(__file__).with_name(
        "bridge_applies_overrides.py"))], input=json.dumps(request), capture_output=True,
        text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(SITE)})
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.split("BRIDGE ", 1)[1])
    assert "error" not in answers[-1], answers[-1]["error"]  # the example's launch file
    assert (answers[-1]["tp"], answers[-1]["micro_batch_size"]) == \
        (exported.tp, exported.micro_batch_size)
    assert answers[-1]["num_layers"] == example.model.num_layers
    for (what, config, s), got in zip(cases, answers):
        assert "error" not in got, (what, got.get("error"))
        assert (got["tp"], got["pp"], got["cp"]) == (config.tp, config.pp, config.cp), what
        assert got["ep"] == config.ep and got["sequence_parallel"] == config.sequence_parallel
        assert got["vp"] == (config.virtual_stages if config.virtual_stages > 1 else None), what
        assert got["data_parallel_size"] == config.dp, what  # world / (tp x pp x cp)
        assert (got["micro_batch_size"], got["global_batch_size"]) == \
            (config.micro_batch_size, 128), what
        assert got["distributed_optimizer"] == [config.zero_stage == 1] * 2, what
        assert (got["num_layers"], got["hidden_size"]) == (s.model.num_layers, s.model.hidden)
        assert got["num_moe_experts"] == (8 if config.ep > 1 else None), what
        assert (got["fp8"] is not None) == config.precision.startswith("fp8"), what
        assert got["recompute_granularity"] == {
            "none": None, "selective": "selective", "full": "full"}[
            config.activation_checkpointing], what
