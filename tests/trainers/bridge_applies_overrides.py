"""Run by tests/trainers/test_megatron_bridge_config.py in a subprocess whose path holds the
Megatron-Bridge trainer's import site (.venv/trainer-sites/megatron_bridge): Bridge's own code
builds a recipe, applies each case's overrides with `process_config_with_overrides` (as
run_recipe.py does) and finalizes and validates them with `runtime_config_update` (what
`pretrain` does first). Reads [{what, world_size, overrides}] as JSON on stdin; prints, per
case, the values Bridge's config holds, or the error it raised.

Two stand-ins, both for what cannot run here: typing.override (Python 3.12) is
typing_extensions'; Transformer Engine (CUDA only) is a module whose every name is an empty
class, imported by Bridge's model modules and run by none of the config code.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
import typing
import warnings

import typing_extensions

if not hasattr(typing, "override"):
    typing.override = typing_extensions.override


class _AnyName(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyName(name, (), {})


class _StandIn(types.ModuleType):
    __path__: list[str] = []
    __version__ = "2.8.0"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyName(name, (), {})


class _TransformerEngine(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] == "transformer_engine":
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        pass


def values(cfg) -> dict:
    m = cfg.model
    return {"tp": m.tensor_model_parallel_size, "pp": m.pipeline_model_parallel_size,
            "cp": m.context_parallel_size, "vp": m.virtual_pipeline_model_parallel_size,
            "ep": m.expert_model_parallel_size, "sequence_parallel": m.sequence_parallel,
            "recompute_granularity": m.recompute_granularity, "num_layers": m.num_layers,
            "hidden_size": m.hidden_size, "num_moe_experts": m.num_moe_experts,
            "micro_batch_size": cfg.train.micro_batch_size,
            "global_batch_size": cfg.train.global_batch_size,
            "distributed_optimizer": [cfg.optimizer.use_distributed_optimizer,
                                      cfg.ddp.use_distributed_optimizer],
            "fp8": m.fp8, "data_parallel_size": cfg.data_parallel_size}


def main() -> None:
    sys.meta_path.insert(0, _TransformerEngine())
    warnings.simplefilter("ignore")
    from megatron.bridge.recipes.gpt.h100.vanilla_gpt import (
        vanilla_gpt_pretrain_1gpu_h100_bf16_config as recipe,
    )
    from megatron.bridge.training.config import runtime_config_update
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    out = []
    for case in json.load(sys.stdin):
        os.environ["WORLD_SIZE"] = str(case["world_size"])  # what torchrun sets
        try:
            cfg = process_config_with_overrides(recipe(), cli_overrides=case["overrides"])
            runtime_config_update(cfg)
            out.append({"what": case["what"], **values(cfg)})
        except Exception as exc:  # noqa: BLE001 - Bridge's refusal is the test's answer
            out.append({"what": case["what"], "error": f"{type(exc).__name__}: {exc}"})
    print("BRIDGE " + json.dumps(out))


if __name__ == "__main__":
    main()
