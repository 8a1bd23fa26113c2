"""Context-parallel layouts (cp > 1) a trainer cannot run, refused before any trial with the
tool's own reason, in one line that names the field and the fix. Beside trainer_layouts.py's
mixture-of-experts rules, and applied the same two ways: to the spec as it is read
(`check_context_space`) and to each candidate layout (`context_refusal`).

Which of ParaTune's cp_comm_type values (p2p ring, a2a Ulysses, allgather) each trainer runs,
read in the releases ParaTune renders for:

- Megatron-LM (megatron-core 0.19.2): all three, in TransformerEngine's attention only (the
  local DotProductAttention asserts "Context parallelism is only supported by
  TEDotProductAttention!"; TEDotProductAttention makes a CUDA stream for it), and never in TE's
  unfused backend ("Disabling UnfusedDotProductAttention as it does not support context
  parallelism"). a2a moves whole query and key/value heads of a tp rank (TE's
  AttnFuncWithCPAndQKVOA2A: "The number of attention heads needs to be divisible by CP size!").
- Megatron-DeepSpeed (f1feb887) and DeepSpeed 0.19.8: Ulysses only (a2a:
  deepspeed.sequence.layer.DistributedAttention); Megatron-DeepSpeed refuses it beside
  Megatron's own sequence parallelism (megatron/initialize.py), and DeepSpeed asserts "Number of
  key-value heads (n) must be at least the sequence parallel size".
- torchtitan 0.3.0: allgather only. Under its default spmd_types backend, keys and values are
  Replicate on the cp mesh axis, so DTensor all-gathers them (models/common/
  decoder_sharding.py), and only FlexAttention may run CP (distributed/full_dtensor.py
  validate_config); with partial_dtensor, FlexAttention all-gathers (flex_cp_allgather) and SDPA
  keeps torch's context_parallel rotate method at its allgather default (torchtitan sets none).
  It checks seq_len against tp (with sequence parallelism) x 2 x cp (trainer.py).
"""

from __future__ import annotations

from typing import Any

# The cp_comm_type values each trainer runs; a trainer not named runs all three.
RUNS: dict[str, tuple[str, ...]] = {"megatron-deepspeed": ("a2a",), "deepspeed": ("a2a",),
                                    "torchtitan": ("allgather",)}
WHY_NOT: dict[str, str] = {
    "megatron-deepspeed": "its context parallelism is DeepSpeed-Ulysses "
                          "(--ds-sequence-parallel-size), an all-to-all over heads",
    "deepspeed": "DeepSpeed's sequence parallelism is Ulysses (deepspeed.sequence.layer."
                 "DistributedAttention), an all-to-all over heads",
    "torchtitan": "torchtitan 0.3 all-gathers keys and values over the cp ranks, with no ring "
                  "(p2p) or Ulysses (a2a)",
}

# torchtitan 0.3.0's configs whose model uses variable-length attention, read from each
# module's config_registry.py (tests check them against the installed registry).
TORCHTITAN_VARLEN_CONFIGS: dict[str, tuple[str, ...]] = {
    "gpt_oss": ("gpt_oss_debugmodel", "gpt_oss_20b", "gpt_oss_120b"),
    "llama3": ("llama3_debugmodel_varlen_attn",),
    "qwen3": ("qwen3_8b_first_85_pct_layers_nvfp4", "sft_qwen3_8b_math"),
    "qwen3_5": ("qwen35_debugmodel_varlen_attn",),
}
VARLEN_CP = ("torchtitan: \"spmd_types + CP is not supported with ScaledDotProductAttention or "
             "VarlenAttention. Use FlexAttention + CP or disable CP.\"")
KV_HEADS_ULYSSES = "\"Number of key-value heads ... must be at least the sequence parallel size\""


def _values(space, name: str) -> list[Any]:
    if space.kind == "list":
        return [getattr(entry, name) for entry in space.configs]
    return list(getattr(space, name))


def _check_comm_types(spec, trainer: str) -> None:
    """A range of comm types the trainer runs: its own by default, and a value it cannot run
    is the range's error."""
    space, runs = spec.space, RUNS.get(trainer)
    if runs is None or space.kind == "list":
        return
    if "cp_comm_type" not in space.model_fields_set:
        space.cp_comm_type = list(runs)
        return
    odd = [t for t in space.cp_comm_type if t not in runs]
    if odd:
        raise ValueError(f"space.cp_comm_type: {trainer} cannot run {odd[0]} ({WHY_NOT[trainer]})"
                         f"; use [{', '.join(runs)}]")


def _check_torchtitan_attention(spec) -> None:
    section = spec.trial.torchtitan
    module, config = (section.module, section.config) if section else ("llama3",
                                                                      "llama3_debugmodel")
    if config in TORCHTITAN_VARLEN_CONFIGS.get(module, ()):
        raise ValueError(f"trial.torchtitan.config: torchtitan's {module} {config} uses "
                         f"variable-length attention, which has no context parallelism "
                         f"({VARLEN_CP}); name a FlexAttention config, or set space.cp to [1]")


def check_context_space(spec) -> None:
    """Refuse, as a spec's ValueError, a context-parallel range the spec's trainer cannot run;
    nothing to check where no layout has cp > 1."""
    if all((cp or 1) == 1 for cp in _values(spec.space, "cp")):
        return
    trainer = spec.trial.trainer or "builtin"
    _check_comm_types(spec, trainer)
    if trainer == "torchtitan":
        _check_torchtitan_attention(spec)


def _comm_type(trainer: str, config) -> str | None:
    runs = RUNS.get(trainer)
    if runs is None or config.cp_comm_type in runs:
        return None
    return (f"{trainer}: cp_comm_type {config.cp_comm_type}: {WHY_NOT[trainer]}; set "
            f"space.cp_comm_type to [{', '.join(runs)}]")


def _kv_heads_per_rank(spec, config) -> int:
    return spec.model.kv_heads // config.tp


def _megatron_lm(spec, config) -> str | None:
    cp = config.cp
    if spec.cluster.device == "cpu":
        return (f"megatron-lm: cp({cp}) runs only in TransformerEngine's attention, which needs "
                "CUDA (Megatron-Core's local attention: \"Context parallelism is only supported "
                "by TEDotProductAttention!\"); use trainer builtin on CPUs, or space.cp [1]")
    if not spec.trial.flash_attention:
        return (f"megatron-lm: cp({cp}) with trial.flash_attention false renders "
                "--attention-backend=unfused, and TransformerEngine's unfused attention has no "
                "context parallelism (\"Disabling UnfusedDotProductAttention as it does not "
                "support context parallelism\"); set trial.flash_attention to true")
    kv = _kv_heads_per_rank(spec, config)
    if config.cp_comm_type == "a2a" and (kv == 0 or kv % cp):
        return (f"megatron-lm: cp({cp}) with cp_comm_type a2a splits the {kv} key/value heads "
                "of a tp rank over cp (TransformerEngine: \"The number of attention heads needs "
                "to be divisible by CP size!\"); use p2p or allgather")
    return None


def _ulysses(trainer: str, spec, config) -> str | None:
    """DeepSpeed's Ulysses, under Megatron-DeepSpeed or a DeepSpeed script."""
    reason = _comm_type(trainer, config)
    if reason:
        return reason
    if trainer == "megatron-deepspeed" and config.sequence_parallel:
        return ("megatron-deepspeed: sequence_parallel with cp > 1: \"sequence_parallel_size > 1 "
                "enables DeepSpeed's sequence parallel, which is not compatible with "
                "Megatron-LM's sequence parallel\"; set space.sequence_parallel to [false]")
    kv = _kv_heads_per_rank(spec, config)
    if kv < config.cp:
        return (f"{trainer}: cp({config.cp}) exceeds the {kv} key/value heads of a tp rank "
                f"(DeepSpeed's Ulysses: {KV_HEADS_ULYSSES}); use a smaller cp or tp")
    return None


def _torchtitan(spec, config) -> str | None:
    reason = _comm_type("torchtitan", config)
    if reason:
        return reason
    divisor = config.dims.seq_divisor  # torchtitan's seq_len_divisor
    seq = spec.model.seq_len
    if seq % divisor:
        return (f"torchtitan: seq_len({seq}) must divide by {divisor}, tp({config.tp}) x 2 x "
                f"cp({config.cp}) with sequence parallelism (\"Training sequence length ... must "
                "be divisible by ... for the configured sequence/context parallelism\"); use "
                "sequence_parallel false or a smaller tp or cp")
    return None


RULES = {"megatron-lm": _megatron_lm, "torchtitan": _torchtitan,
         "megatron-deepspeed": lambda spec, config: _ulysses("megatron-deepspeed", spec, config),
         "deepspeed": lambda spec, config: _ulysses("deepspeed", spec, config)}


def context_refusal(trainer: str | None, spec, config) -> str | None:
    """Why `trainer` cannot run this context-parallel layout, or None (cp 1 always runs)."""
    rule = RULES.get(trainer or "builtin")
    if rule is None or config.cp == 1:
        return None
    return rule(spec, config)
