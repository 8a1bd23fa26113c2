"""The command-line flags of Megatron-LM and Megatron-DeepSpeed that ParaTune renders or exports,
as each tool's own argument parser declares them, and a check of an argument list against them.

Each table maps a flag to its kind: a `store_true` switch (takes no value) or a value flag with
its type and, where the parser restricts them, its choices. The tables were written by reading
the parsers at the commits named in `MEGATRON_LM_SOURCE` and `MEGATRON_DEEPSPEED_SOURCE`.

Megatron-LM now generates most flags from megatron-core's config dataclasses (TransformerConfig
and the ModelParallelConfig it extends: field x_y becomes --x-y, megatron/training/
argument_utils.py). The mixture-of-experts flags ParaTune renders that are generated so
(`MEGATRON_LM_CONFIG_FLAGS`) have no row here: tests/trainers/test_moe_trainers.py checks them against
the installed megatron-core's fields and types. Its MoE flags still written by hand
(`_add_moe_args`: --num-experts, --moe-layer-freq) are in the table, read at the commit named
and unchanged in megatron-core 0.19.2. The context-parallel flags were written by hand at that
commit (`_add_distributed_args`, `_add_transformer_engine_args`), so they have rows here;
megatron-core 0.19.2 generates --context-parallel-size and --transformer-impl from its classes
now (the tests check the rows against them) and still writes --cp-comm-type by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The two tools' trainer names (registry.py), the keys of every table here that differs by tool.
LM = "megatron-lm"
DS = "megatron-deepspeed"

MEGATRON_LM_REPO = "NVIDIA/Megatron-LM"
MEGATRON_LM_COMMIT = "000c4ac24f61159c138b0975def722c65245983c"
MEGATRON_LM_SOURCE = f"{MEGATRON_LM_REPO}@{MEGATRON_LM_COMMIT} (megatron/training/arguments.py)"

# microsoft/Megatron-DeepSpeed moved to deepspeedai/Megatron-DeepSpeed; the copy stored under the
# old name (bb4ac1cc) predates --normalization, --swiglu and --num-key-value-heads.
MEGATRON_DEEPSPEED_REPO = "deepspeedai/Megatron-DeepSpeed"
MEGATRON_DEEPSPEED_COMMIT = "f1feb8877d760b4ceaa0551debbf1cb4026fc9be"
MEGATRON_DEEPSPEED_SOURCE = (
    f"{MEGATRON_DEEPSPEED_REPO}@{MEGATRON_DEEPSPEED_COMMIT} (megatron/arguments.py; --deepspeed "
    "and --deepspeed_config from DeepSpeed 0.19.8 add_config_arguments)")


@dataclass(frozen=True)
class Flag:
    """One parser argument: a switch, or a value of `type` limited to `choices` when given."""

    store_true: bool = False
    type: type = str
    choices: tuple = ()


SWITCH = Flag(store_true=True)
INT = Flag(type=int)
TEXT = Flag()
TIMING_LEVEL = Flag(type=int, choices=(0, 1, 2))  # choices=range(0, 3) in both parsers
TIMING_OPTION = Flag(choices=("max", "minmax", "all"))
RECOMPUTE_GRANULARITY = Flag(choices=("full", "selective"))
RECOMPUTE_METHOD = Flag(choices=("uniform", "block"))
PATTERN_CHARACTERS = re.compile(r"[,\d\[\]()+*]+")


def moe_freq(text: str) -> int | str:
    """Megatron-LM's moe_freq_type: an int, or a Python list expression of digits, commas,
    brackets, parentheses, + and * (its _eval_pattern refuses any other character)."""
    if "[" not in text:
        return int(text)
    if not PATTERN_CHARACTERS.fullmatch(text):
        raise ValueError(text)
    return text


MOE_LAYER_FREQ = Flag(type=moe_freq)

# Megatron-LM flags generated from TransformerConfig fields in megatron-core 0.19.2: the
# renderer's MoE flags, --kv-channels, the FP8 ones (megatron_precision.py) and the pipeline
# split's.
MEGATRON_LM_CONFIG_FLAGS = (
    "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--moe-token-dispatcher-type", "--moe-grouped-gemm", "--kv-channels",
    "--fp8-format", "--fp8-recipe",
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
)

# Flags both parsers declare alike.
_COMMON = {
    "--tensor-model-parallel-size": INT, "--pipeline-model-parallel-size": INT,
    "--micro-batch-size": INT, "--global-batch-size": INT,
    "--num-layers": INT, "--hidden-size": INT, "--ffn-hidden-size": INT,
    "--num-attention-heads": INT, "--seq-length": INT, "--max-position-embeddings": INT,
    "--swiglu": SWITCH, "--disable-bias-linear": SWITCH,
    "--untie-embeddings-and-output-weights": SWITCH, "--use-rotary-position-embeddings": SWITCH,
    "--no-position-embedding": SWITCH, "--bf16": SWITCH, "--sequence-parallel": SWITCH,
    "--recompute-granularity": RECOMPUTE_GRANULARITY, "--recompute-method": RECOMPUTE_METHOD,
    "--recompute-num-layers": INT, "--num-layers-per-virtual-pipeline-stage": INT,
    "--use-distributed-optimizer": SWITCH,
    "--train-iters": INT, "--log-interval": INT, "--eval-iters": INT, "--eval-interval": INT,
    "--timing-log-level": TIMING_LEVEL, "--timing-log-option": TIMING_OPTION,
    "--data-path": TEXT, "--split": TEXT, "--vocab-file": TEXT, "--merge-file": TEXT,
    "--vocab-size": INT, "--tokenizer-model": TEXT,
    "--lr": Flag(type=float), "--min-lr": Flag(type=float),
    "--lr-decay-style": Flag(choices=("constant", "linear", "cosine", "inverse-square-root")),
}

MEGATRON_LM_FLAGS: dict[str, Flag] = {
    **_COMMON,
    "--num-virtual-stages-per-pipeline-rank": INT,  # the parser also keeps the layers-per form
    "--num-experts": INT,
    "--moe-layer-freq": MOE_LAYER_FREQ,
    "--group-query-attention": SWITCH,
    "--num-query-groups": INT,
    "--normalization": Flag(choices=("LayerNorm", "RMSNorm")),
    "--position-embedding-type": Flag(choices=("learned_absolute", "rope", "mrope", "relative",
                                               "none")),
    "--attention-backend": Flag(choices=("flash", "fused", "unfused", "local", "auto")),
    "--context-parallel-size": INT,
    # nargs="+", type=str, no choices (one type for every layer, or one per layer);
    # TransformerEngine takes p2p, a2a, a2a+p2p and all_gather (megatron_context.py).
    "--cp-comm-type": TEXT,
    "--transformer-impl": Flag(choices=("local", "transformer_engine")),
    "--use-flash-attn": SWITCH,
    "--overlap-grad-reduce": SWITCH,  # read by the cost model from the base arguments
    # Written by hand in megatron-core 0.19.2's megatron/training/arguments.py
    # (_add_distributed_args, _add_training_args, _add_experimental_args).
    "--overlap-param-gather": SWITCH,
    "--decoder-first-pipeline-num-layers": INT,
    "--decoder-last-pipeline-num-layers": INT,
    "--overlap-param-gather-with-optimizer-step": SWITCH,
    "--ddp-bucket-size": INT,
    "--optimizer-cpu-offload": SWITCH,
    "--optimizer-offload-fraction": Flag(type=float),
    "--use-precision-aware-optimizer": SWITCH,
    "--log-throughput": SWITCH,
    "--mock-data": SWITCH,
    "--distributed-backend": Flag(choices=("nccl", "gloo")),
    "--lr-decay-style": Flag(choices=("constant", "linear", "cosine", "inverse-square-root",
                                      "WSD")),
    "--tokenizer-type": Flag(choices=(
        "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer",
        "SentencePieceTokenizer", "GPTSentencePieceTokenizer", "HuggingFaceTokenizer",
        "Llama2Tokenizer", "TikTokenizer", "MultimodalTokenizer", "NullTokenizer",
        "NullMultimodalTokenizer", "SFTTokenizer")),
}

MEGATRON_DEEPSPEED_FLAGS: dict[str, Flag] = {
    **_COMMON,
    "--num-key-value-heads": INT,
    "--kv-channels": INT,
    "--ds-sequence-parallel-size": INT,  # DeepSpeed-Ulysses; not with --sequence-parallel
    # DeepSpeed's MoE layer: --num-experts takes nargs='+' (one value per MoE layer or one for
    # all), --topk its k, --expert-interval its layer spacing (default 2).
    "--num-experts": INT,
    "--topk": INT,
    "--expert-interval": INT,
    "--moe-expert-parallel-size": INT,
    "--enable-expert-tensor-parallelism": SWITCH,
    "--create-moe-param-group": SWITCH,
    "--normalization": Flag(choices=("layernorm", "rmsnorm")),
    # Its own (DeepSpeed-era) activation checkpointing, still read by the DeepSpeed pipeline.
    "--checkpoint-activations": SWITCH,
    "--checkpoint-num-layers": INT,
    "--deepspeed-activation-checkpointing": SWITCH,
    "--partition-activations": SWITCH,
    "--use-flash-attn": SWITCH,  # an alias of --use-flash-attn-v1
    "--use-flash-attn-v2": SWITCH,
    "--no-pipeline-parallel": SWITCH,
    "--zero-stage": INT,  # type=int, no choices; DeepSpeed reads the stage from the config
    "--deepspeed": SWITCH,
    "--deepspeed_config": TEXT,
    "--distributed-backend": Flag(choices=("nccl", "gloo", "ccl", "hccl")),
    "--tokenizer-type": Flag(choices=(
        "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer",
        "SentencePieceTokenizer", "GPTSentencePieceTokenizer", "HFTokenizer", "NullTokenizer")),
}


def problems(args: list[str], table: dict[str, Flag]) -> list[str]:
    """What in `args` the parser behind `table` would refuse, for flags in `--flag=value` or
    `--flag value` form: an unknown flag, a value on a switch, a value of the wrong type or out
    of its choices. Items that are not flags (the script, a path after `--data-path`) pass."""
    found: list[str] = []
    i = 0
    while i < len(args):
        item = args[i]
        i += 1
        if not item.startswith("--"):
            continue
        name, eq, value = item.partition("=")
        flag = table.get(name)
        if flag is None:
            found.append(f"{name}: not an argument of this parser")
            continue
        if flag.store_true:
            if eq:
                found.append(f"{name}: a switch, given the value {value!r}")
            continue
        if not eq:
            if i >= len(args) or args[i].startswith("--"):
                found.append(f"{name}: needs a value")
                continue
            value, i = args[i], i + 1
        try:
            typed = flag.type(value)
        except ValueError:
            found.append(f"{name}: {value!r} is not a {flag.type.__name__}")
            continue
        if flag.choices and typed not in flag.choices:
            found.append(f"{name}: {value!r} is not one of {', '.join(map(str, flag.choices))}")
    return found
