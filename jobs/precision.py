"""GEMM precision in the trainer: bf16 autocast on GPU (float32 on CPU), or FP8 through torchao's
Float8Linear (its "tensorwise" and "rowwise" recipes, as torchtitan's Float8 converter).

FP8 needs FP8 tensor cores (CUDA compute capability 8.9+: Ada, Hopper, Blackwell) and torchao;
anywhere else the layout is refused before any process group, with the device named. The model's
Linear layers are converted before tensor parallelism and FSDP wrap them (torchtitan's order),
all but the output head (the logits stay in bf16) and layers whose per-rank dimensions are not
multiples of 16 (FP8 GEMMs need them).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from jobs.fp8_recipes import FP8_RECIPES

FP8_CAPABILITY = (8, 9)


def _cuda_index() -> int:
    return int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()


def _device_name() -> str:
    """The device this rank would train on, in words, for a refusal."""
    if not torch.cuda.is_available():
        return "this node has no CUDA device (CPU)"
    index = _cuda_index()
    major, minor = torch.cuda.get_device_capability(index)
    return f"cuda:{index} is {torch.cuda.get_device_name(index)} (compute capability {major}.{minor})"


def precision_problem(config) -> str | None:
    """Why this job cannot run the layout's precision here, or None."""
    precision = config.precision
    if precision == "bf16":
        return None
    if precision not in FP8_RECIPES:
        return (f"precision {precision}: the built-in trainer runs FP8 through torchao's "
                f"Float8Linear recipes only ({', '.join(FP8_RECIPES)})")
    if not torch.cuda.is_available() or \
            torch.cuda.get_device_capability(_cuda_index()) < FP8_CAPABILITY:
        return (f"precision {precision} needs FP8 tensor cores (CUDA compute capability 8.9+); "
                f"{_device_name()}")
    try:
        import torchao.float8  # noqa: F401
    except ImportError as exc:
        return f"precision {precision} needs torchao (torchao.float8), not importable: {exc}"
    return None


def fp8_convertible(module: nn.Module, fqn: str, tp: int) -> bool:
    """Whether a layer becomes Float8Linear: a Linear other than the output head whose
    dimensions, split over tp ranks, stay multiples of 16."""
    if not isinstance(module, nn.Linear) or fqn.split(".")[-1] == "output":
        return False
    return module.in_features % (16 * tp) == 0 and module.out_features % (16 * tp) == 0


def apply_fp8(model: nn.Module, precision: str, tp: int = 1) -> int:
    """Convert the model's eligible Linear layers to torchao's Float8Linear with the recipe of
    `precision`; the number converted. A no-op for bf16."""
    if precision not in FP8_RECIPES:
        return 0
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    before = sum(isinstance(m, nn.Linear) for m in model.modules())
    config = Float8LinearConfig.from_recipe_name(FP8_RECIPES[precision])
    convert_to_float8_training(model, config=config,
                               module_filter_fn=lambda m, fqn: fp8_convertible(m, fqn, tp))
    plain = sum(type(m) is nn.Linear for m in model.modules())
    return before - plain
