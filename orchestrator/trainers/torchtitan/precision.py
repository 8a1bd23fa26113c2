"""A layout's FP8 recipe and offload for torchtitan 0.3.0, and the config registry that gives a
campaign's torchtitan config its FP8 converters.

torchtitan 0.3 has no FP8 flag: a config function of a module's config_registry.py builds its
model with converters (`model_registry(flavor, converters=[Float8LinearConverter.Config(...)])`,
as llama3_405b, llama3_8b_mxfp8 and deepseek_v3_671b do), which swap the model config's Linear
configs for Float8Linear or MXFP8Linear ones before anything is built. ConfigManager takes any
importable module for `--module` and any callable attribute of it for `--config`, so an FP8
layout renders `--module orchestrator.trainers.torchtitan_precision --config MODULE/CONFIG/
PRECISION`: this module's `__getattr__` answers that name with a config function that loads
the campaign's own config as ConfigManager would and runs torchtitan's converters on its model
(`with_precision`), the way torchtitan's FP8 configs do:

- fp8-rowwise: Float8LinearConverter (recipe "rowwise"; it has no tensorwise recipe), leaving
  lm_head (and an MoE router's gate) in bf16 as llama3_405b and deepseek_v3_671b do, and
  Float8GroupedExpertsConverter for a mixture of experts' grouped GEMMs;
- mxfp8: MXFP8LinearConverter (every Linear of a dense model, as llama3_8b_mxfp8; for MoE the
  attention, shared-expert and dense feed-forward ones, as deepseek_v3_debugmodel_mxfp8) and
  MXFP8GroupedExpertsConverter.

The converters check the device themselves: Float8 needs NVIDIA SM89+ (or AMD MI300+), MXFP8
SM100+, and both need torchao. `model_compile_enabled` follows the registry config's compile
setting, as torchtitan's own FP8 configs compute it. The trial's interpreter runs this module
(PYTHONPATH holds ParaTune); a launch file run elsewhere needs ParaTune importable too.

Offload: optimizer+params renders `--training.enable-cpu-offload` (FSDP2's CPUOffloadPolicy for
parameters, gradients and optimizer states), and `--training.no-enable-cpu-offload` otherwise,
so an override never outvotes the layout. CUDA graphs need "no CPU<->GPU synchronization during
the captured region" (TrainingConfig.disable_cuda_graphs), and the offload moves every shard
between host and device inside the step, so an offloading layout also disables them.
"""

from __future__ import annotations

# The name launch files give `--module`: this module's path before it moved into torchtitan/,
# which stays importable (common/legacy_paths.py), so recorded programs and exports still run.
REGISTRY_MODULE = "orchestrator.trainers.torchtitan_precision"
PRECISIONS = ("fp8-rowwise", "mxfp8")
QUANTIZED_LINEARS = {"Float8Linear", "MXFP8Linear", "NVFP4Linear"}  # torchtitan's converters'


def module_and_config(module: str, config: str, precision: str) -> tuple[str, str]:
    """`--module` and `--config` for the campaign's torchtitan config at this precision."""
    if precision == "bf16":
        return module, config
    return REGISTRY_MODULE, f"{module}/{config}/{precision}"


def offload_args(layout) -> list[str]:
    """torchtitan's CPU offload for the layout, with CUDA graphs off while it offloads."""
    if layout.offload == "optimizer+params":
        return ["--training.enable-cpu-offload", "--training.disable-cuda-graphs"]
    return ["--training.no-enable-cpu-offload"]


def _converters(precision: str, moe: bool, compiled: bool) -> list:
    from torchtitan.components.quantization import (
        Float8GroupedExpertsConverter,
        Float8LinearConverter,
        MXFP8GroupedExpertsConverter,
        MXFP8LinearConverter,
    )

    if precision == "fp8-rowwise":
        skip = ["lm_head", "router.gate"] if moe else ["lm_head"]
        linear = Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns=skip,
                                              model_compile_enabled=compiled)
        experts = Float8GroupedExpertsConverter.Config(model_compile_enabled=compiled)
    else:
        fqns = ["attention", "shared_experts", "feed_forward"] if moe else []
        linear = MXFP8LinearConverter.Config(fqns=fqns, model_compile_enabled=compiled)
        experts = MXFP8GroupedExpertsConverter.Config(model_compile_enabled=compiled)
    return [linear, experts] if moe else [linear]


def with_precision(trainer_config, precision: str):
    """The torchtitan Trainer.Config with its model converted to `precision` by torchtitan's
    own converters (a model whose Linear layers another converter already swapped is left to
    its config: name its bf16 config instead)."""
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import GroupedExperts

    spec = trainer_config.model_spec
    owners = {type(c).__qualname__.split(".")[0] for _, c, _, _ in spec.model.traverse(
        Linear.Config)}
    swapped = owners & QUANTIZED_LINEARS
    if swapped:
        raise ValueError(f"torchtitan config {spec.name} {spec.flavor} already has "
                         f"{', '.join(sorted(swapped))} layers; name its bf16 config in "
                         "trial.torchtitan.config")
    moe = any(True for _ in spec.model.traverse(GroupedExperts.Config))
    compile_config = trainer_config.compile
    compiled = compile_config.enable and "model" in compile_config.components
    model = spec.model
    for converter in _converters(precision, moe, compiled):
        model = converter.build().convert(model)
    spec.model = model
    return trainer_config


def _load(module: str, config: str):
    """The config torchtitan's ConfigManager loads for `--module module --config config`."""
    from torchtitan.config import ConfigManager

    return ConfigManager()._load_config(["--module", module, "--config", config])[0]


def __getattr__(name: str):
    """`--config MODULE/CONFIG/PRECISION`: the config function ConfigManager calls."""
    module, _, rest = name.partition("/")
    config, _, precision = rest.partition("/")
    if not (module and config) or precision not in PRECISIONS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def config_function():
        return with_precision(_load(module, config), precision)

    config_function.__name__ = config_function.__qualname__ = name
    return config_function
