"""A layout and the spec's model shape as Megatron-Bridge ConfigContainer overrides: the
KEY=VALUE words that scripts/training/run_recipe.py (v0.6.0) hands, after the recipe is built, to
`process_config_with_overrides` (megatron/bridge/training/utils/omegaconf_utils.py, 0.6.2),
which parses them with Hydra's override grammar and writes them back into the dataclasses.

The fields, read in megatron-bridge 0.6.2 and the megatron-core 0.19.2 it builds on:

- model.*: the recipe's provider (`GPTModelProvider`, models/gpt_provider.py) is a Megatron-Core
  `TransformerConfig`, so the parallel sizes are ModelParallelConfig's
  (tensor_model_parallel_size, pipeline_model_parallel_size, virtual_pipeline_model_parallel_size,
  context_parallel_size, expert_model_parallel_size, expert_tensor_parallel_size,
  sequence_parallel), recompute is recompute_granularity / recompute_method /
  recompute_num_layers, the pipeline split is account_for_embedding_in_pipeline_split,
  account_for_loss_in_pipeline_split or num_layers_in_first/last_pipeline_stage, CP's transport
  cp_comm_type ("all_gather", as Megatron-LM's, megatron_context.py); the MoE fields are
  TransformerConfig's num_moe_experts, moe_router_topk, moe_ffn_hidden_size, ... The shape
  (num_layers, hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups, kv_channels,
  seq_length, share_embeddings_and_output_weights) is set from the spec so a trial measures
  the model the cost model prices, and a LLaMA shape drops the linear layers' biases
  (add_bias_linear, as Megatron-LM's --disable-bias-linear; Megatron-Core allows biased experts
  only at expert_tensor_parallel_size 1); activation, norm and positions stay the recipe's (a
  callable such as activation_func cannot be overridden from text).
- train.micro_batch_size / train.global_batch_size (megatron/training/config TrainingConfig).
- ZeRO-1 is the distributed optimizer. config.py `_validate_and_sync_distributed_optimizer_settings`
  turns it on in both ddp and optimizer when either has it ("Automatically enabling distributed
  optimizer for both settings"), and recipes/common.py `_pretrain_common` has it on with
  overlap_grad_reduce and overlap_param_gather, so every layout states all of them.
- Overlap: ddp.overlap_grad_reduce, and ddp/optimizer.overlap_param_gather with the distributed
  optimizer only (off at stage 0, where Megatron-Core has no parameter gather to overlap);
  None keeps the recipe's. Bucket: ddp.bucket_size.
- FP8: `mixed_precision` names a recipe of training/mixed_precision.py's MIXED_PRECISION_RECIPES
  (`@register`): bf16_mixed; bf16_with_fp8_current_scaling_mixed (fp8 "hybrid", recipe
  "tensorwise"; it keeps the first and last layer in bf16: first_last_layers_bf16 = True);
  bf16_with_fp8_delayed_scaling_mixed ("delayed"); bf16_with_fp8_subchannel_scaling_mixed
  ("blockwise"); bf16_with_mxfp8_mixed ("mxfp8"). ConfigContainer.mixed_precision is
  `MixedPrecisionConfig | str`, and _pretrain_common sets the string "bf16_mixed".
- Offload: optimizer.optimizer_cpu_offload with use_precision_aware_optimizer and
  optimizer_offload_fraction 1.0 (Megatron-Core's OptimizerConfig, as megatron_precision.py).
"""

from __future__ import annotations

from orchestrator.layout import expert_tp
from orchestrator.trainers.megatron.context import MEGATRON_CP_COMM_TYPES
from orchestrator.trainers.megatron.moe import moe_layer_pattern

# ParaTune's precision -> Megatron-Bridge's mixed-precision recipe.
MIXED_PRECISION = {"bf16": "bf16_mixed",
                   "fp8-tensorwise": "bf16_with_fp8_current_scaling_mixed",
                   "fp8-delayed": "bf16_with_fp8_delayed_scaling_mixed",
                   "fp8-blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
                   "mxfp8": "bf16_with_mxfp8_mixed"}
# The keys a layout or the model owns, with the spec field that sets them: a user override of
# one is refused (section.py), so no trial silently runs another layout than its record says.
LAYOUT_KEYS = {
    "model.tensor_model_parallel_size": "space.tp",
    "model.pipeline_model_parallel_size": "space.pp",
    "model.virtual_pipeline_model_parallel_size": "space.virtual_stages",
    "model.context_parallel_size": "space.cp", "model.cp_comm_type": "space.cp_comm_type",
    "model.expert_model_parallel_size": "space.ep",
    "model.expert_tensor_parallel_size": "space.etp",
    "model.sequence_parallel": "space.sequence_parallel",
    "model.recompute_granularity": "space.activation_checkpointing",
    "model.recompute_method": "space.recompute_num_layers",
    "model.recompute_num_layers": "space.recompute_num_layers",
    "train.micro_batch_size": "space.micro_batch_size",
    "train.global_batch_size": "scale.global_batch_size",
    "train.train_iters": "trial.steps",
    "optimizer.use_distributed_optimizer": "space.zero_stage",
    "ddp.use_distributed_optimizer": "space.zero_stage",
    "ddp.overlap_grad_reduce": "space.overlap_comm", "ddp.overlap_param_gather": "space.overlap_comm",
    "optimizer.overlap_param_gather": "space.overlap_comm", "ddp.bucket_size": "space.bucket_size",
    "mixed_precision": "space.precision", "optimizer.optimizer_cpu_offload": "space.offload",
    "model.num_layers": "model.num_layers", "model.hidden_size": "model.hidden",
    "model.ffn_hidden_size": "model.ffn_hidden", "model.num_attention_heads": "model.num_heads",
    "model.num_query_groups": "model.num_kv_heads", "model.seq_length": "model.seq_len",
    "dataset.seq_length": "model.seq_len",
}
# What a trial adds only to be measured: a training_log line per iteration with its TFLOP/s.
MEASUREMENT = ("logger.log_interval=1", "logger.log_throughput=true")
# What a trial must not do: save or load checkpoints (run_recipe.py runs in the Bridge
# checkout, so every trial would share the recipe's nemo_experiments/ folder), validate,
# or write TensorBoard files there.
TRIAL_ONLY = ("checkpoint.save=null", "checkpoint.load=null", "validation.eval_iters=0",
              "logger.tensorboard_dir=null")


def value(item) -> str:
    """A value in Hydra's grammar: true/false, null, numbers and plain names as they are."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if item is None:
        return "null"
    if isinstance(item, list):
        return "[" + ",".join(value(v) for v in item) + "]"
    return str(item)


def _pairs(pairs: list[tuple[str, object]]) -> list[str]:
    return [f"{key}={value(item)}" for key, item in pairs]


def shape_overrides(model) -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = [
        ("model.num_layers", model.num_layers), ("model.hidden_size", model.hidden),
        ("model.ffn_hidden_size", model.ffn_hidden), ("model.num_attention_heads", model.num_heads),
        ("model.num_query_groups", model.kv_heads), ("model.seq_length", model.seq_len),
        ("dataset.seq_length", model.seq_len),
        ("model.share_embeddings_and_output_weights", model.tied_embeddings)]
    if model.kv_channels is not None:
        pairs.append(("model.kv_channels", model.kv_channels))
    if model.gated_mlp:  # LLaMA has no biases (Megatron-LM's --disable-bias-linear)
        pairs.append(("model.add_bias_linear", False))
    return pairs


def moe_overrides(spec, layout) -> list[tuple[str, object]]:
    model = spec.model
    if not model.is_moe:
        return []
    pairs: list[tuple[str, object]] = [
        ("model.num_moe_experts", model.num_experts), ("model.moe_router_topk", model.experts_per_token),
        ("model.moe_ffn_hidden_size", model.expert_ffn_hidden)]
    if model.shared_expert_ffn_hidden:
        pairs.append(("model.moe_shared_expert_intermediate_size", model.shared_expert_ffn_hidden))
    if model.first_dense_layers or model.moe_layer_freq != 1:
        pairs.append(("model.moe_layer_freq", moe_layer_pattern(model)))
    if model.moe_router_num_groups:
        pairs += [("model.moe_router_num_groups", model.moe_router_num_groups),
                  ("model.moe_router_group_topk", model.moe_router_group_topk)]
    return pairs + [("model.expert_model_parallel_size", layout.ep),
                    ("model.expert_tensor_parallel_size", expert_tp(layout.knob_values()))]


def parallel_overrides(spec, layout) -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = [
        ("model.tensor_model_parallel_size", layout.tp),
        ("model.pipeline_model_parallel_size", layout.pp),
        ("model.virtual_pipeline_model_parallel_size",
         layout.virtual_stages if layout.virtual_stages > 1 else None),
        ("model.context_parallel_size", layout.cp), ("model.sequence_parallel", layout.sequence_parallel)]
    if layout.cp > 1:
        pairs.append(("model.cp_comm_type", MEGATRON_CP_COMM_TYPES[layout.cp_comm_type]))
    if layout.pp > 1 and layout.pipeline_split == "embedding_loss":
        pairs += [("model.account_for_embedding_in_pipeline_split", True),
                  ("model.account_for_loss_in_pipeline_split", True)]
    elif layout.pp > 1 and layout.pipeline_split == "first_last":
        layers = layout.stage_layers(spec.model.num_layers)
        pairs += [("model.num_layers_in_first_pipeline_stage", layers[0]),
                  ("model.num_layers_in_last_pipeline_stage", layers[-1])]
    return pairs


def recompute_overrides(layout) -> list[tuple[str, object]]:
    mode = layout.activation_checkpointing
    if mode == "full" and layout.recompute_num_layers is not None:  # the first N of each stage
        method, layers = "block", layout.recompute_num_layers
    elif mode == "full":
        method, layers = "uniform", 1
    else:
        method, layers = None, None
    return [("model.recompute_granularity", None if mode == "none" else mode),
            ("model.recompute_method", method), ("model.recompute_num_layers", layers)]


def optimizer_overrides(layout) -> list[tuple[str, object]]:
    distributed = layout.zero_stage == 1
    pairs: list[tuple[str, object]] = [("optimizer.use_distributed_optimizer", distributed),
                                       ("ddp.use_distributed_optimizer", distributed)]
    if layout.overlap_comm is not None:
        pairs.append(("ddp.overlap_grad_reduce", layout.overlap_comm))
    gather = bool(layout.overlap_comm) and distributed
    if layout.overlap_comm is not None or not distributed:
        pairs += [("ddp.overlap_param_gather", gather), ("optimizer.overlap_param_gather", gather)]
    if layout.bucket_size is not None:
        pairs.append(("ddp.bucket_size", layout.bucket_size))
    if layout.offload == "optimizer":
        pairs += [("optimizer.optimizer_cpu_offload", True),
                  ("optimizer.use_precision_aware_optimizer", True),
                  ("optimizer.optimizer_offload_fraction", 1.0)]
    return pairs


def bridge_overrides(spec, layout) -> list[str]:
    """The model shape and the layout as KEY=VALUE overrides, the same for a trial and an
    export (the layout is checked first by capabilities.py)."""
    pairs = (parallel_overrides(spec, layout) + moe_overrides(spec, layout)
             + [("train.micro_batch_size", layout.micro_batch_size),
                ("train.global_batch_size", layout.global_batch_size())]
             + shape_overrides(spec.model) + recompute_overrides(layout)
             + optimizer_overrides(layout) + [("mixed_precision", MIXED_PRECISION[layout.precision])])
    return _pairs(pairs)


def trial_overrides(total_steps: int) -> list[str]:
    """A trial's length, its per-iteration log line, and what it must not write or run."""
    return [f"train.train_iters={total_steps}", *MEASUREMENT, *TRIAL_ONLY]
