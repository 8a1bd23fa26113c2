"""Mixture-of-experts layouts a trainer cannot run, refused before any trial with the trainer's
own reason, in one line that names the field and the fix; context-parallel ones are
context_layouts.py's, applied here beside them.

Two kinds of rule. What a trainer cannot take at all (a model feature, a range, its model
config) is refused as the spec is read (`check_trainer_space`, beside campaign.py's Megatron
rules). What depends on one layout's values is applied to the candidates (`layout_refusal`):
the space keeps the layouts the trainer runs and says why it dropped the others, and the
adapters check the same rule before they render a layout. Sources, read in the releases
ParaTune renders for:

- Megatron-LM (megatron-core 0.19.2): `ModelParallelConfig.__post_init__` warns "When using
  expert parallelism and tensor parallelism for training, sequence parallelism must be used";
  `TransformerConfig.__post_init__` asserts "Bias in Moe is only supported when ETP==1" (a GPT
  shape has biases); parallel_state needs etp x ep x pp to divide the world, the generic rule.
- Megatron-DeepSpeed (f1feb887) builds DeepSpeed's own MoE layer: experts are copies of its
  MLP (--ffn-hidden-size), on layers N, 2N, ... counted from 1 (--expert-interval N), with no
  shared experts; DeepSpeed 0.19.8 makes expert groups inside the data-parallel group
  (utils/groups.py: dp % ep == 0), splits experts over the whole tp group or not at all
  (--enable-expert-tensor-parallelism), and refuses its native MoE under ZeRO stage 3.
- torchtitan 0.3.0: expert parallelism borrows the dp_shard x cp x tp ranks (ParallelismConfig
  .expert_parallel_degree: efsdp = dp_shard x cp x tp / ep; dp_replicate stays outside), has no
  expert tensor parallelism, and builds its model from its own registry, so an MoE campaign
  names one of its MoE configs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.common.errors import SpecError
from orchestrator.layout import expert_tp
from orchestrator.spec.context_layouts import check_context_space, context_refusal
from orchestrator.spec.pipeline_layouts import pipeline_refusal
from orchestrator.spec.precision_layouts import precision_refusal

# torchtitan 0.3.0's MoE configs, from each module's config_registry.py ("*": every config of
# the module); the modules listed in DENSE build dense models only. A module named in neither
# (an experiment, the user's own) is not judged.
TORCHTITAN_MOE_CONFIGS: dict[str, tuple[str, ...]] = {
    "deepseek_v3": ("*",),
    "gpt_oss": ("*",),
    "kimi_k2_7": ("*",),
    "qwen3": ("qwen3_30b_a3b", "qwen3_moe_debug", "qwen3_moe_deepep",
              "qwen3_debugmodel_moe_param_groups"),
    "qwen3_5": ("qwen35_debugmodel_moe", "qwen35_35b_a3b", "qwen35_122b_a10b",
                "qwen35_397b_a17b"),
}
TORCHTITAN_DENSE_MODULES = ("llama3", "muse_glimmer", "flux")
TORCHTITAN_MOE_EXAMPLES = "deepseek_v3 deepseek_v3_16b, qwen3 qwen3_30b_a3b, gpt_oss gpt_oss_20b"


def torchtitan_is_moe(module: str, config: str) -> bool | None:
    """Whether torchtitan's --module/--config builds a mixture of experts; None when unknown."""
    if module in TORCHTITAN_MOE_CONFIGS:
        listed = TORCHTITAN_MOE_CONFIGS[module]
        return "*" in listed or config in listed
    return False if module in TORCHTITAN_DENSE_MODULES else None


def torchtitan_data_parallel(config, gpus_per_node: int) -> tuple[int, int, str | None]:
    """(data_parallel_shard_degree, data_parallel_replicate_degree, fsdp_reshard_after_forward)
    of a layout on torchtitan; None for the reshard policy where nothing is sharded."""
    dp, f = config.dp, config.factors(gpus_per_node)
    if f.secondary == 1 and f.sp == f.sg == f.sos and dp % f.sp == 0:
        group = f.sp  # DDP (1), ZeRO-3 / FSDP (dp), HSDP / MiCS (g)
        return (1, dp, None) if group == 1 else (group, dp // group, "always")
    if f.sp == 1 and f.sg == f.sos == dp:
        return dp, 1, "never"  # ZeRO-2
    if f.sp == f.sg == 1 and f.sos == dp:
        return 1, dp, None  # ZeRO-1: torchtitan has no optimizer-only sharding
    raise SpecError(
        f"layout {config.key()}: torchtitan cannot shard parameters, gradients and optimizer "
        f"states by {f.sp}, {f.sg} and {f.sos} (secondary {f.secondary}); it runs DDP, ZeRO-2 "
        "(FSDP without resharding), FSDP and HSDP: use space.zero_stage, not AMSP factors")


def _values(space, name: str) -> list[Any]:
    """A knob's values in the space: its range, or every listed layout's (None where unset)."""
    if space.kind == "list":
        return [getattr(entry, name) for entry in space.configs]
    return list(getattr(space, name))


def _check_torchtitan(spec) -> None:
    section, model = spec.trial.torchtitan, spec.model
    module, config = (section.module, section.config) if section else ("llama3",
                                                                      "llama3_debugmodel")
    if model.is_moe and torchtitan_is_moe(module, config) is False:
        raise ValueError(f"trial.torchtitan.config: torchtitan's {module} {config} is a dense "
                         f"model, and model {model.name!r} has {model.num_experts} experts; "
                         f"name an MoE config of torchtitan's, such as {TORCHTITAN_MOE_EXAMPLES}")
    odd = [v for v in _values(spec.space, "etp") if v not in (None, 1)]
    if odd:
        raise ValueError(f"space.etp: torchtitan has no expert tensor parallelism (etp "
                         f"{odd[0]}): its experts take tp's ranks as ep or FSDP ranks; "
                         "use [null] or [1]")


def _megatron_deepspeed_model(model) -> str | None:
    """What of an MoE model Megatron-DeepSpeed's MoE layer cannot build, as `key: reason`."""
    fix = "or use trainer megatron-lm"
    if model.moe_router_num_groups:
        return (f"model.moe_router_num_groups: megatron-deepspeed routes to any expert (no "
                f"group-limited routing); remove it, {fix}")
    if model.shared_expert_ffn_hidden:
        return ("model.shared_expert_ffn_hidden: megatron-deepspeed has no shared experts (its "
                f"--mlp-type residual is another layer); set 0, {fix}")
    if model.first_dense_layers or model.moe_layer_freq > 1:
        key = "first_dense_layers" if model.first_dense_layers else "moe_layer_freq"
        return (f"model.{key}: megatron-deepspeed puts experts on layers N, 2N, ... counted "
                "from 1 (--expert-interval), not ParaTune's layers; use first_dense_layers 0 "
                f"and moe_layer_freq 1, {fix}")
    return None


ZERO3_MOE = ("DeepSpeed's native MoE layer refuses ZeRO stage 3 (\"Native DeepSpeed MoE is not "
             "supported with ZeRO Stage 3\"); use stages 0 to 2")


def _check_megatron_deepspeed(spec) -> None:
    model, space = spec.model, spec.space
    if not model.is_moe:
        return
    problem = _megatron_deepspeed_model(model)
    if problem:
        raise ValueError(problem)
    if "zero_stage" not in space.model_fields_set and space.kind != "list":
        space.zero_stage = [s for s in space.zero_stage if s < 3] or [0]
    if 3 in _values(space, "zero_stage"):
        raise ValueError(f"space.zero_stage: {ZERO3_MOE}")


def _check_deepspeed(spec) -> None:
    """A DeepSpeed script sees ep, etp and cp only through its own {placeholders} (they build
    its MoE and Ulysses layers): a range of them that no argument carries would run one program
    under several names (`space.kind: list` names each layout itself, as for a command)."""
    if spec.space.kind == "list":
        return
    args = " ".join(spec.trial.deepspeed.args) if spec.trial.deepspeed else ""
    for name in ("ep", "etp", "cp"):
        values = list(dict.fromkeys(_values(spec.space, name)))
        if len(values) > 1 and "{" + name + "}" not in args:
            raise ValueError(f"space.{name}: trial.deepspeed.args hold no {{{name}}}, so its "
                             f"values {', '.join(map(str, values))} would run the same "
                             f"program; pass {{{name}}} to the script, or search one value")


def _check_builtin(spec) -> None:
    if spec.model.moe_router_num_groups:
        raise ValueError("model.moe_router_num_groups: the built-in trainer routes each token to "
                         "any expert (no group-limited routing); remove it, or use trainer "
                         "megatron-lm")


SPACE_CHECKS = {"torchtitan": _check_torchtitan, "megatron-deepspeed": _check_megatron_deepspeed,
                "deepspeed": _check_deepspeed, "builtin": _check_builtin}


def check_trainer_space(spec) -> None:
    """Refuse, as a spec's ValueError, a model or a range the spec's trainer cannot run."""
    check = SPACE_CHECKS.get(spec.trial.trainer or "builtin")
    if check is not None:
        check(spec)
    check_context_space(spec)


def _megatron_lm(model, config, gpus_per_node: int) -> str | None:
    if config.ep > 1 and config.tp > 1 and not config.sequence_parallel:
        return (f"megatron-lm: ep({config.ep}) with tp({config.tp}) needs sequence_parallel "
                "(Megatron-Core: \"When using expert parallelism and tensor parallelism for "
                "training, sequence parallelism must be used\"); add true to "
                "space.sequence_parallel")
    etp = expert_tp(config.knob_values())
    if not model.gated_mlp and etp > 1:
        return (f"megatron-lm: a GPT model's experts have biases, which Megatron-Core splits "
                f"over no etp({etp}) (\"Bias in Moe is only supported when ETP==1\"); set "
                "space.etp to [1]")
    return None


def _megatron_deepspeed(model, config, gpus_per_node: int) -> str | None:
    problem = _megatron_deepspeed_model(model)
    if problem:
        return f"megatron-deepspeed: {problem}"
    if config.sharding is None and config.zero_stage == 3:
        return f"megatron-deepspeed: zero_stage 3: {ZERO3_MOE}"
    if config.dp % config.ep:
        return (f"megatron-deepspeed: ep({config.ep}) must divide dp({config.dp}), as DeepSpeed "
                "makes its expert groups inside the data-parallel group; use an ep that "
                "divides dp, or trainer megatron-lm")
    if config.etp not in (None, 1, config.tp):
        return (f"megatron-deepspeed: etp({config.etp}) must be 1 or tp({config.tp}) "
                "(--enable-expert-tensor-parallelism splits experts over the whole tp group or "
                "not at all); set space.etp to [null] or [1]")
    return None


def _torchtitan(model, config, gpus_per_node: int) -> str | None:
    if config.etp not in (None, 1):
        return (f"torchtitan: no expert tensor parallelism (etp {config.etp}): its experts take "
                "tp's ranks as ep or FSDP ranks; set space.etp to [null] or [1]")
    shard = torchtitan_data_parallel(config, gpus_per_node)[0]
    # A stage's ranks but the replicated data-parallel ones: dp_shard x cp x tp.
    borrowed = dataclasses.replace(config.dims, dp=shard).stage_ranks
    if borrowed % config.ep:
        return (f"torchtitan: ep({config.ep}) must divide dp_shard({shard}) x cp({config.cp}) x "
                f"tp({config.tp}) = {borrowed}, the ranks expert parallelism borrows "
                "(replicated data-parallel ranks stay outside); use zero_stage 2 or 3 (FSDP over "
                "dp), or a smaller ep")
    return None


def _builtin(model, config, gpus_per_node: int) -> str | None:
    """What jobs/ implements (its `check_experts_feasible`), refused before any trial."""
    etp = expert_tp(config.knob_values())
    if etp != 1:
        unset = ", tp's when unset" if config.etp is None else ""
        return (f"builtin: etp({etp}{unset}): the built-in trainer keeps experts whole; set "
                "space.etp to [1]")
    if config.cp > 1:
        return (f"builtin: cp({config.cp}) with MoE layers: experts over context-parallel ranks "
                "are not implemented; set space.cp to [1]")
    return None


LAYOUT_RULES = {"builtin": _builtin, "megatron-lm": _megatron_lm, "megatron-deepspeed": _megatron_deepspeed,
                "torchtitan": _torchtitan}


def layout_refusal(trainer: str | None, spec, config) -> str | None:
    """Why `trainer` cannot run this layout of the spec's model, or None: the mixture-of-experts
    rules where the model has experts, the context-parallel ones where cp > 1, then those of
    precision, offload, overlap and bucket (precision_layouts.py) and of the pipeline split."""
    rule = LAYOUT_RULES.get(trainer or "builtin")
    if rule is not None and spec.model.is_moe:
        reason = rule(spec.model, config, spec.gpus_per_node)
        if reason:
            return reason
    return (context_refusal(trainer, spec, config) or precision_refusal(trainer, config)
            or pipeline_refusal(trainer, config))


def runnable(spec, configs: list, refused: list[str] | None = None) -> list:
    """The layouts of `configs` the spec's trainer can run; why each other was dropped goes to
    `refused`. None left of some is a SpecError with the first reason. A plan that names no
    trainer (`spec.trainer_rules` False) keeps them all."""
    if not getattr(spec, "trainer_rules", True):
        return list(configs)
    kept, reasons = [], []
    for config in configs:
        reason = layout_refusal(spec.trial.trainer, spec, config)
        if reason:
            reasons.append(reason)
        else:
            kept.append(config)
    if refused is not None:
        refused += reasons
    if configs and not kept:
        raise SpecError(f"{spec.name}: the search space holds no layout trainer "
                        f"{spec.trial.trainer} can run: {reasons[0]}")
    return kept


def check_listed(spec, configs: list) -> None:
    """`space.kind: list` names each layout: one the trainer cannot run is the spec's error."""
    for index, config in enumerate(configs):
        reason = layout_refusal(spec.trial.trainer, spec, config)
        if reason:
            raise ValueError(f"space.configs[{index}]: {reason}")
