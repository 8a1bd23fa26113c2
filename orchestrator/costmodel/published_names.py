"""What the published measurements' names mean to the cost model: a GPU type's cluster preset,
a model name's shape preset, a framework's runtime and defaults, a precision's recipe, and the
text of a row as published ("16 (derived)", "NA", "1.0"). Each function raises `NotPriced`
with one line where the model has no such thing (published_rows.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.costmodel.zero_engine import MEGATRON_CORE_GRADIENTS, ZeroEngine
from orchestrator.result import PER_OP_SELECTIVE
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS, Cluster, ModelShape


class NotPriced(Exception):
    """Why the cost model cannot price a row: one line, naming the field."""


# ---------------------------------------------------------------------------------------------
# Text as published: "16 (derived)", "1.0", "NA", "n/a", "None", "null", "32 (local batch)".

ABSENT = {"", "na", "n/a", "none", "null", "-"}  # "not published"


def number(text: str) -> float | None:
    text = (text or "").strip()
    if text.lower() in ABSENT:
        return None
    match = re.match(r"[-+]?\d[\d,]*(\.\d+)?", text)
    if not match:
        return None
    return float(match.group(0).replace(",", ""))


# ---------------------------------------------------------------------------------------------
# Clusters: gpu_type text -> a preset. GB200/GB300 are priced with their NVL72 NVLink domain as
# the node (clusters.py), whatever the source's gpus_per_node (4 GPUs per compute tray).

_CLUSTERS = (
    (r"v100.*16", "v100-16g"),
    (r"a100.*40|a100_40", "a100-40g"),
    (r"a100", "a100-80g"),
    (r"h100.*96", "h100-96g"),
    (r"h100", "h100-80g"),
    (r"h800", "h800-80g"),
    (r"h200", "h200-141g"),
    (r"gb300", "gb300-nvl72"),
    (r"gb200", "gb200-nvl72"),
    (r"b300", "b300-270g"),
    (r"b200", "b200-180g"),
)


def cluster_of(gpu_type: str) -> Cluster:
    text = gpu_type.lower()
    if "mi3" in text or "amd" in text or "instinct" in text:
        raise NotPriced(f"gpu_type {gpu_type}: no cluster preset (AMD Instinct)")
    for pattern, name in _CLUSTERS:
        if re.search(pattern, text):
            return CLUSTER_PRESETS[name]
    raise NotPriced(f"gpu_type {gpu_type or '(empty)'}: no cluster preset")


# ---------------------------------------------------------------------------------------------
# Models: a name -> a preset (or a reason), for rows that do not publish their shape.

_UNMODELLED_MODELS = (
    (r"nemotron ?h\b|nemotron 3 (nano|super|ultra|5)", "hybrid Mamba-Transformer: not modelled"),
    (r"deepseek ?v4", "shape not published"),
    (r"nemotron (8|22)b", "shape not published in the source"),
    (r"gpt 2 \(readme", "per-test model not stated by the source"),
)
_MODELS = (
    (r"grok ?1", "grok-1-314b"),
    (r"llama ?4 maverick", "llama-4-maverick"),
    (r"nemotron ?4? ?15b", "nemotron-4-15b"),
    (r"nemotron ?4? ?340b", "nemotron-4-340b"),
    (r"deepseek ?v3", "deepseek-v3-671b"),
    (r"kimi", "kimi-k2"),
    (r"qwen3 ?30b", "qwen3-30b-a3b"),
    (r"qwen3 ?235b", "qwen3-235b-a22b"),
    (r"gpt oss 120b", "gpt-oss-120b"),
    (r"llama ?3(\.1)? ?405b", "llama-3.1-405b"),
    (r"llama ?3(\.1)? ?70b", "llama-3.1-70b"),
    (r"llama ?3(\.1)? ?8b", "llama-3.1-8b"),
    # Llama 2 7B and 13B have LLaMA 1's shapes (Touvron et al. 2023, arXiv 2307.09288,
    # Table 1); the context is the row's.
    (r"llama ?2 ?7b", "llama-7b"),
    (r"llama ?2 ?13b", "llama-13b"),
    (r"llama ?2 ?70b", "llama-70b"),
    (r"gpt ?3 ?5b", "gpt3-5b"),
    (r"gpt ?3 ?20b", "gpt3-20b"),
    (r"gpt ?3 ?175b|nemo megatron", "gpt-175b"),
)


def normalized(name: str) -> str:
    return re.sub(r"[-_\s]+", " ", name.lower())


def preset_of(name: str) -> ModelShape | None:
    text = normalized(name)
    for pattern, reason in _UNMODELLED_MODELS:
        if re.search(pattern, text):
            raise NotPriced(f"model {name!r}: {reason}")
    for pattern, preset in _MODELS:
        if re.search(pattern, text):
            return MODEL_PRESETS[preset]
    return None


# ---------------------------------------------------------------------------------------------
# Frameworks: the trainer's runtime, and what its defaults are. These are the published
# frameworks as their papers ran them (Megatron's overlap is the row's, not ParaTune's adapter
# defaults), so the model, which imports no adapter, states each runtime here.


@dataclass(frozen=True)
class Framework:
    family: str  # megatron | deepspeed | torchtitan | fsdp
    runtime: ZeroEngine
    # Megatron's defaults in this release: the distributed optimizer (ZeRO-1), the DDP
    # reduction behind the backward, sequence parallelism with TP.
    distributed_optimizer: bool = False
    sequence_parallel: bool = False
    assumptions: tuple[str, ...] = ()


def _megatron(overlap: bool, *, distributed_optimizer: bool, sequence_parallel: bool,
              assumptions: tuple[str, ...] = (), local_ddp_2021: bool = False) -> Framework:
    # Megatron-Core's gradient handling came with its distributed optimizer (2022-2023).
    core = MEGATRON_CORE_GRADIENTS if distributed_optimizer else {}
    return Framework("megatron", ZeroEngine(ddp_overlaps=overlap,
                                            ddp_one_16bit_call=local_ddp_2021,
                                            param_gather_overlaps=distributed_optimizer and overlap,
                                            **core),
                      distributed_optimizer, sequence_parallel, assumptions)


# NeMo (1.x and 2.x recipes), Megatron-Bridge, the Megatron-Core scripts and NVIDIA's MLPerf
# implementations run the distributed optimizer with --overlap-grad-reduce, its weight gather
# overlapped (NeMo-Framework-Launcher's *_performance.yaml `overlap_param_sync: true`,
# Megatron-Bridge's recipes/common.py `overlap_param_gather=True`) and sequence parallelism
# with TP; Megatron-LM of 2020-2022 had none of these (the distributed optimizer came in 2022,
# overlap-grad-reduce in 2023).
_MODERN_MEGATRON = ("NeMo/Megatron-Core defaults: distributed optimizer (ZeRO-1, gradients "
                    "reduce-scattered), --overlap-grad-reduce and --overlap-param-gather (per "
                    "model chunk when interleaved), sequence parallel with TP; TP "
                    "communication overlap and CUDA graphs not modelled")
_OLD_MEGATRON = ("Megatron-LM of 2020-2022: DDP reduced after the backward (no "
                 "--overlap-grad-reduce), no distributed optimizer")
_LOCAL_DDP_2021 = ("Megatron-LM @8aa4619 under --fp16: its local DDP all-reduces every fp16 "
                   "gradient in one call (no --fp32-allreduce in DLPerf's script)")


def framework_of(values: dict[str, str], file_hint: str) -> Framework:
    text = values.get("framework", "")
    low = text.lower()
    if "maxtext" in low or "paxml" in low:
        raise NotPriced(f"framework {text}: JAX trainer, no runtime modelled")
    if "torchtitan" in low:
        runtime = ZeroEngine(zero_engine="torch", grads_once_per_step=False, shards_over_cp=True,
                             selective_recompute=PER_OP_SELECTIVE)
        return Framework("torchtitan", runtime, sequence_parallel=True,
                          assumptions=("torchtitan: FSDP2 reduce-scatters after every "
                                       "micro-batch, TP is sequence-parallel; torch.compile "
                                       "and async TP not modelled",))
    if "llm-foundry" in low or "composer" in low:
        runtime = ZeroEngine(zero_engine="torch", grads_once_per_step=False)
        return Framework("fsdp", runtime, assumptions=(
            "llm-foundry/Composer: PyTorch FSDP, gradients reduce-scattered after every "
            "micro-batch (no no_sync)",))
    if "deepspeed" in low:
        return Framework("deepspeed", ZeroEngine(ddp_engine="deepspeed"),
                          assumptions=("DeepSpeed's Megatron-LM example: DeepSpeed's engine",))
    if "oneflow" in low:
        return _megatron(False, distributed_optimizer=False, sequence_parallel=False,
                         assumptions=("OneFlow-GPT priced as Megatron-LM's 3D parallelism "
                                      "(same layouts; OneFlow's kernels and overlap not "
                                      "modelled)", _OLD_MEGATRON))
    old = any(k in low for k in ("2021", "2022", "korthikanti", "8aa4619"))
    if old and "megatron" in low:
        sp = "sequence parallel" in (values.get("recompute", "") + low)
        if "8aa4619" in low:  # the commit DLPerf ran, whose DDP was read (zero_engine.py)
            return _megatron(False, distributed_optimizer=False, sequence_parallel=sp,
                             assumptions=(_OLD_MEGATRON, _LOCAL_DDP_2021), local_ddp_2021=True)
        return _megatron(False, distributed_optimizer=False, sequence_parallel=sp,
                         assumptions=(_OLD_MEGATRON,))
    if "megatron" in low or "nemo" in low or ("nvidia" in low and file_hint == "mlperf"):
        return _megatron(True, distributed_optimizer=True, sequence_parallel=True,
                         assumptions=(_MODERN_MEGATRON,))
    raise NotPriced(f"framework {text or '(empty)'}: implementation not named, no runtime "
                     "chosen")


# ---------------------------------------------------------------------------------------------
# Precision: the layout knob's value, or Unpriced.


_FP16 = ("fp16 priced as the 16-bit layout (precision bf16): the dense 16-bit tensor-core peak "
         "(FP16 on a V100, which has no BF16) and 2-byte values; loss scaling not modelled")


def precision_of(text: str, framework: Framework) -> tuple[str, str, tuple[str, ...]]:
    """The layout's precision knob, the precision's name in the landscape (the knob's, but fp16
    for fp16 mixed precision, which the knob's 16-bit "bf16" prices), and the assumptions."""
    knob, notes = _precision_knob(text, framework)
    return knob, "fp16" if _FP16 in notes else knob, notes


def _precision_knob(text: str, framework: Framework) -> tuple[str, tuple[str, ...]]:
    low = text.lower()
    if not low.strip():
        raise NotPriced("precision: not published")
    if "fp4" in low:
        raise NotPriced(f"precision {text}: not modelled")
    if "mxfp8" in low or "fp8-mx" in low:
        return "mxfp8", ()
    if "fp8-cs" in low:
        return "fp8-tensorwise", ("FP8-CS (current scaling) priced as per-tensor scaling",)
    if "rowwise" in low:
        return "fp8-rowwise", ()
    if "tensorwise" in low:
        return "fp8-tensorwise", ()
    if "float8" in low:
        return "fp8-tensorwise", ("Float8 linears: torchao's default recipe, tensorwise",)
    if "fp8" in low:
        if framework.family == "fsdp":
            return "fp8-tensorwise", ("amp_fp8: Transformer Engine through Composer, priced "
                                      "as per-tensor scaling",)
        return "fp8-delayed", ("FP8 recipe not named: Transformer Engine's delayed scaling, "
                               "NeMo's default",)
    if "bf16" in low or "bfloat16" in low:
        return "bf16", ()
    if "fp16" in low or "float16" in low:
        return "bf16", (_FP16,)
    raise NotPriced(f"precision {text}: not modelled")


class RowText:
    """A row's published text, read field by field, and the assumptions made pricing it."""

    def __init__(self, values: dict[str, str]) -> None:
        self.v = {k: (v or "").strip() for k, v in values.items() if k is not None}
        self.assumptions: list[str] = []
        # The settings that decide memory (recompute, micro-batch) priced by a rule or a
        # default because the row does not publish them (published_layout.py).
        self.unpublished_memory_settings: list[str] = []
        self.file_hint = "mlperf" if "mlperf" in self.v.get("source", "").lower() or \
            "mlperf_version" in self.v else ""

    def text(self, field: str) -> str:
        return self.v.get(field, "")

    def count(self, field: str) -> int | None:
        value = number(self.text(field))
        if value is None:
            return None
        if value != int(value) or value < 1:
            raise NotPriced(f"{field} {self.text(field)!r}: not a positive whole number")
        return int(value)
