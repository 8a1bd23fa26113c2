"""One published measurement (a row of benchmarks/measured/) as the cost model's inputs, or the
reason the model cannot price it.

A row is the text its source published ("" where nothing was). Pricing it takes a model shape
(the row's own columns, else a preset of orchestrator/presets/models.py), a cluster preset
(its `gpu_type`), a layout (`Layout`) and the trainer's runtime (zero_engine.py), and
converts the published metric into the measured time of one optimizer step. Every setting the
source does not publish is priced at the framework's default (or, where there is none, at the
least favourable plausible value) and listed in `assumptions`; a setting the model has no knob
for (NVFP4, a hybrid Mamba model, a JAX framework) makes the row `Unpriced`, with one line saying
why. So does a parameter-efficient fine-tune (task LoRA, PEFT, adapters): it trains adapters on
frozen weights that hold no gradients or optimizer state, not what the model prices; full
fine-tuning (SFT) trains every weight and is priced as training. An unpublished recompute is
the least the model's own memory verdict says fits (published_layout.py), unless the source's
own launch code says what ran (Megatron-Bridge's and NeMo 24.07's, published_recipes.py). Nothing here is
fitted to any row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.costmodel.estimate import CostModel
from orchestrator.costmodel.memory import GB
from orchestrator.costmodel.performance import model_flops
from orchestrator.costmodel.published_layout import layout as layout_of_row
from orchestrator.costmodel.published_names import (
    NotPriced,
    RowText,
    cluster_of,
    framework_of,
    normalized,
    number,
    precision_of,
    preset_of,
)
from orchestrator.presets import PEAK_RANGE_OTHER_END, Cluster, ModelShape
from orchestrator.space import Layout

__all__ = ["PricedRow", "Unpriced", "price_row"]

_PARAMETER_EFFICIENT = re.compile(r"\b(q?lora|peft|adapters?|p-tuning|prefix[- ]tuning)\b",
                                  re.IGNORECASE)


@dataclass(frozen=True)
class PricedRow:
    # One model on one cluster at one GPU count, seq len and precision (and framework): rows
    # sharing it are layouts of one choice.
    landscape: str
    series: str  # the same without the GPU count (a scale series)
    cost: CostModel
    config: Layout
    # Measured time of one optimizer step, converted from the published metric (how: in
    # `assumptions`).
    measured_step_s: float
    # Peak memory per GPU in GB (1e9 bytes) where the source reports it (DLPerf memory_mib,
    # torchtitan memory_gib).
    measured_memory_gb: float | None
    # Every setting the source does not publish and what was priced instead.
    assumptions: tuple[str, ...]
    # Which of the settings that decide memory (recompute, micro_batch) the row does not
    # publish: priced by a rule or a default, so its memory verdict is no evidence of the
    # memory model's error (benchmarks/memory_margin.py).
    unpublished_memory_settings: tuple[str, ...] = ()

    @property
    def measured_tokens_per_s_per_gpu(self) -> float:
        tokens = self.config.global_batch_size() * self.cost.model.seq_len
        return tokens / self.measured_step_s / self.config.world_size


@dataclass(frozen=True)
class Unpriced:
    reason: str  # one line: why the model cannot price the row


def price_row(values: dict[str, str]) -> PricedRow | Unpriced:
    """The cost model's inputs for one published row, or why it cannot price it."""
    try:
        return _Pricing(values).price()
    except NotPriced as e:
        return Unpriced(str(e))


class _Pricing(RowText):
    """The pricing of one row: each step may raise NotPriced."""

    def price(self) -> PricedRow:
        metric = self.text("metric_name")
        if metric == "time_to_train_min":
            raise NotPriced("metric time_to_train_min: not a step time")
        if self.text("metric_value") == "" or number(self.text("metric_value")) is None:
            raise NotPriced("metric_value: not published")
        gpus = self.count("gpus")
        if gpus is None:
            raise NotPriced("gpus: not published")
        cluster = cluster_of(self.text("gpu_type"))
        if cluster.name in PEAK_RANGE_OTHER_END:
            self.assumptions.append(
                f"peak not published, a range: {cluster.name}'s {cluster.peak_tflops:g} TFLOPS "
                f"BF16 ({cluster.fp8_peak_tflops:g} FP8), its least favourable end "
                f"(the other: {PEAK_RANGE_OTHER_END[cluster.name]['peak_tflops']:g})")
        framework = framework_of(self.v, self.file_hint)
        self.assumptions += framework.assumptions
        self.training_task()
        model = self.model()
        precision, precision_name, notes = precision_of(self.text("precision"), framework)
        self.assumptions += notes
        gpus_per_node = self.gpus_per_node(cluster, gpus)
        cost = CostModel(model, cluster, gpus_per_node, runtime=framework.runtime)
        config = layout_of_row(self, cost, gpus, framework, precision)
        step = self.measured_step(cost, config, gpus)
        landscape_parts = (f"{model.name} ({model.num_layers} layers, seq {model.seq_len})",
                           cluster.name, precision_name, self.text("framework"))
        series = " | ".join(landscape_parts)
        landscape = f"{series} | {gpus} GPUs"
        return PricedRow(landscape, series, cost, config, step, self.measured_memory(),
                         tuple(dict.fromkeys(self.assumptions)),
                         tuple(sorted(self.unpublished_memory_settings)))

    def training_task(self) -> None:
        """Raise for a parameter-efficient fine-tune, named by its task, model or notes."""
        for field in ("task", "model", "notes"):
            if _PARAMETER_EFFICIENT.search(self.text(field)):
                shown = self.text(field) if field == "task" else repr(self.text(field))
                raise NotPriced(f"{field} {shown}: parameter-efficient fine-tuning, not modelled")

    # -- model ------------------------------------------------------------------------------

    def model(self) -> ModelShape:
        name = self.text("model")
        layers, hidden, heads = (self.count(f) for f in ("num_layers", "hidden", "heads"))
        ffn = self.count("ffn_hidden")
        seq = self.count("seq_len")
        vocab_note = re.search(r"vocab (\d+)", self.text("notes"))
        preset = preset_of(name)
        if hidden is not None and heads is not None and layers is not None:
            model = self.model_from_columns(name, layers, hidden, heads, ffn, vocab_note)
        elif preset is not None:
            model = preset
            if layers is not None and layers != preset.num_layers:
                model = self.with_layers(preset, layers)
        else:
            raise NotPriced(f"model {name!r}: shape not published")
        if seq is None:
            seq = self.default_seq_len(model)
        if seq != model.seq_len:
            model = model.model_copy(update={"seq_len": seq})
        return model

    def model_from_columns(self, name: str, layers: int, hidden: int, heads: int,
                           ffn: int | None, vocab_note) -> ModelShape:
        low = normalized(name)
        if "mpt" in low:
            # MPT (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): GELU MLP of 4h,
            # tied embeddings, vocabulary 50,368.
            return ModelShape(name=name, num_layers=layers, hidden=hidden, num_heads=heads,
                              ffn_hidden=ffn or 4 * hidden, vocab_size=50368, seq_len=2048,
                              gated_mlp=False, tied_embeddings=True)
        vocab = int(vocab_note.group(1)) if vocab_note else 51200
        if not vocab_note:
            self.assumptions.append("vocabulary 51,200: Megatron's padded GPT-2 vocabulary")
        return ModelShape(name=name, num_layers=layers, hidden=hidden, num_heads=heads,
                          ffn_hidden=ffn or 4 * hidden, vocab_size=vocab, seq_len=2048,
                          gated_mlp=False, tied_embeddings=True)

    def with_layers(self, preset: ModelShape, layers: int) -> ModelShape:
        """A proxy with fewer layers (dgxc-benchmarking's scaled-down runs)."""
        update: dict = {"num_layers": layers, "name": f"{preset.name}"}
        if preset.first_dense_layers >= layers:
            update["first_dense_layers"] = 0
            self.assumptions.append(f"{layers}-layer proxy: its layers all MoE")
        try:
            return ModelShape(**{**preset.model_dump(), **update})
        except ValueError as e:
            raise NotPriced(f"num_layers {layers}: {str(e).splitlines()[0]}") from None

    def default_seq_len(self, model: ModelShape) -> int:
        if "torchtitan" in self.text("framework").lower():
            self.assumptions.append("seq_len not published: torchtitan's llama3 toml, 8,192")
            return 8192
        if re.search(r"finetuning|sft", self.text("model").lower()):
            raise NotPriced("seq_len: not published for this fine-tuning run")
        self.assumptions.append(f"seq_len not published: the model's {model.seq_len}")
        return model.seq_len

    # -- cluster ----------------------------------------------------------------------------

    def gpus_per_node(self, cluster: Cluster, gpus: int) -> int:
        if cluster.gpus_per_node == 72:
            self.assumptions.append("NVL72: the 72-GPU NVLink domain priced as one node")
            return 72
        published = self.count("gpus_per_node")
        return min(published or cluster.gpus_per_node, cluster.gpus_per_node)

    # -- layout -----------------------------------------------------------------------------

    def measured_step(self, cost: CostModel, layout: Layout, gpus: int) -> float:
        metric = self.text("metric_name")
        value = number(self.text("metric_value"))
        if value is None or value <= 0:
            raise NotPriced(f"metric_value {self.text('metric_value')!r}: not a positive number")
        tokens = layout.global_batch_size() * cost.model.seq_len
        if metric in ("iteration_time_s", "step_time_s", "median_train_step_time_s"):
            return value
        if metric == "iteration_latency_ms":
            return value / 1000
        if "tokens" in metric:
            self.assumptions.append("step time = global_batch x seq_len / (tokens/s/GPU x GPUs)")
            return tokens / (value * gpus)
        if metric == "throughput_samples_per_s":
            self.assumptions.append("step time = global_batch / samples/s")
            return layout.global_batch_size() / value
        flops = model_flops(cost.model, tokens)
        if "2021" in self.text("framework"):
            flops = model_flops(cost.model, tokens, layout)
            self.assumptions.append("TFLOP/s of 2021 count the recompute (the paper's formula)")
        if metric in ("tflops_per_gpu", "model_tflops_per_gpu"):
            self.assumptions.append("the source's FLOP convention taken as Megatron's "
                                    "(model FLOPs of the model's shape)")
            return flops / (value * 1e12 * gpus)
        if metric == "mfu":
            peak = cost.cluster.peak_tflops
            self.assumptions.append(f"MFU against the dense BF16 peak ({peak:g} TFLOPS)")
            return flops / (value / 100 * peak * 1e12 * gpus)
        raise NotPriced(f"metric {metric or '(empty)'}: no conversion to a step time")

    def measured_memory(self) -> float | None:
        mib, gib = number(self.text("memory_mib")), number(self.text("memory_gib"))
        if mib is not None:
            return mib * 2**20 / GB
        if gib is not None:
            return gib * 2**30 / GB
        return None
