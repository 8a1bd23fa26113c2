"""Where each constant that moves a published figure comes from, and which figures are checks.

A constant is a `source` (a datasheet, paper or measurement, cited), a `fit` (chosen so that
named published figures come out: `fitted_to`, or derived from measured rows that are no
published figure: `fitted_to_rows`) or an unvalidated `assumption` (with the published figures
it moves: `moves`). Values are read from the code, never restated. A figure
(published_figures.py) some constant was fitted to, or that is a ratio or ordering of such a
figure, is a fit, not a check: `check(id)`, which the published-figure tests call, refuses it,
so no figure is claimed as a check of a constant fitted to it. provenance_tables.py renders
this registry into docs/costmodel.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from orchestrator.costmodel import amsp, fit_verdict, memory, offload, precision
from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.costmodel.published_figures import FIGURES, Figure, figure
from orchestrator.presets import CLUSTER_PRESETS
from orchestrator.presets.clusters import NCCL

SOURCE, FIT, ASSUMPTION = "source", "fit", "assumption"
CHECK, MISS = "check", "check, a documented miss (strict xfail)"
FIT_ROLE = "fit, not a check"

# Coefficients fields that only calibration sets: at their defaults (1.0, None) the analytic
# model is unscaled, so no published figure rests on them.
CALIBRATION_ONLY = ("dp_exposure", "dp_exposure_gathers", "scale_compute", "scale_bubble",
                    "scale_model_parallel_comm", "scale_model_parallel_latency",
                    "scale_data_parallel_comm")

__all__ = ["FIGURES", "Constant", "Figure", "check", "figure", "fit", "fitted_by", "role"]


@dataclass(frozen=True)
class Constant:
    name: str
    where: str
    read: Callable[[], object]
    kind: str
    basis: str  # the source, what it was fitted to, or why it is assumed
    fitted_to: tuple[str, ...] = ()
    moves: tuple[str, ...] = ()  # for an assumption: the published figures resting on it
    fitted_to_rows: str = ""  # for a fit to measured rows (no published figure): which

    @property
    def value(self) -> object:
        return self.read()


def _coefficient(name: str) -> Callable[[], object]:
    return lambda: getattr(Coefficients(), name)


def _preset(preset: str, field: str) -> Callable[[], object]:
    return lambda: getattr(CLUSTER_PRESETS[preset], field)


def _nccl(field: str) -> Callable[[], object]:
    return lambda: NCCL[field]


GEMM_FIGURES = ("amsp-7b-8gpu-amsp-mfu", "megatron-1t-hfu")
GEMM_FIT = ("chosen with the shape rule (compute.py) so that AMSP 7B on 8 A800s prints 64% "
            "and Megatron-LM's 1T layer 52% HFU; NVIDIA's GEMM guidance (75-80% of peak on "
            "4,096-wide BF16 GEMMs) bounds it but does not give it")
# The figures whose pass or miss changed over the 0-64 KB chunk costs tried
# (benchmarks/chunk_cost_sensitivity.py): the ones that decided 16 KB.
CHUNK_FIGURES = ("amsp-7b-1024-mics-mfu", "amsp-30b-1024-zeropp-mfu",
                 "amsp-tablev-7b-m1-all", "amsp-tablev-13b-m8-all",
                 "amsp-table-iv-7b-plan", "amsp-table-iv-13b-plan")
DEEPSPEED_BASELINES = ("amsp-7b-1024-mics-mfu", "amsp-13b-1024-mics-mfu",
                       "amsp-30b-1024-mics-mfu", "amsp-7b-1024-zeropp-mfu",
                       "amsp-13b-1024-zeropp-mfu", "amsp-30b-1024-zeropp-mfu",
                       "amsp-7b-1024-zero1-mfu", "amsp-7b-1024-zero3-mfu",
                       "amsp-13b-1024-zero3-mfu", "amsp-13b-8gpu-zero3-mfu",
                       "amsp-7b-8gpu-zero1-mfu", "amsp-7b-8gpu-mics-mfu")
FRONTIER_FIGURES = ("frontier-175b-mfu", "frontier-1t-mfu", "frontier-175b-weak-scaling",
                    "frontier-1t-weak-scaling", "frontier-175b-strong-scaling",
                    "frontier-1t-strong-scaling")
FRONTIER_ASSUMED = ("not measured on MI250X: set with the shape rule while the Frontier figures "
                    "were printed, from AMD's remark that BF16 GEMMs reach about 3/4 of peak on "
                    "large square shapes; no record says it was or was not chosen against them")

PRESET_SOURCES = {
    "a800-80g": ("A800 SXM: the A100's 312 TFLOPS BF16 dense and 80 GB (A100 datasheet), NVLink "
                 "capped at 400 GB/s bidirectional; AMSP's test bed: 4 HDR InfiniBand NICs, "
                 "100 GB/s per node (AMSP §VI-A)",
                 ("peak_tflops", "memory_gb", "intra_node_gbps", "inter_node_gbps")),
    "a100-80g": ("A100 SXM 80GB datasheet (312 TFLOPS BF16 dense, NVLink3 600 GB/s "
                 "bidirectional); DGX A100 guide (8x HDR 200 Gb/s: 200 GB/s per node)",
                 ("peak_tflops", "memory_gb", "intra_node_gbps", "inter_node_gbps")),
    "h100-80g": ("H100 SXM datasheet (989 BF16 and 1,979 FP8 TFLOPS dense, NVLink4 900 GB/s "
                 "bidirectional, 3.35 TB/s HBM3); DGX H100 (8x NDR 400 Gb/s: 400 GB/s per node)",
                 ("peak_tflops", "fp8_peak_tflops", "memory_gb", "intra_node_gbps",
                  "inter_node_gbps", "hbm_gbps")),
    "h800-80g": ("the H100's compute and HBM with NVLink capped at 400 GB/s bidirectional; "
                 "DeepSeek-V3 report §3.1, §3.2.2: one 400 Gb/s InfiniBand NIC per GPU",
                 ("peak_tflops", "fp8_peak_tflops", "memory_gb", "intra_node_gbps",
                  "inter_node_gbps", "hbm_gbps")),
    "v100-32g": ("DGX-2 (ZeRO-Offload, arXiv 2101.06840, Tables 2 and 4): V100-SXM3 32 GB at "
                 "125 TFLOPS FP16, NVSwitch 300 GB/s bidirectional, 8x 100 Gb/s InfiniBand, "
                 "1.5 TB host on PCIe Gen3 x16 (16 GB/s each way), CPU-Adam over 10B "
                 "parameters in 2.57 s",
                 ("peak_tflops", "memory_gb", "intra_node_gbps", "inter_node_gbps",
                  "host_memory_gb", "host_link_gbps", "host_adam_ns_per_param")),
    "frontier": ("OLCF Frontier user guide: an MI250X GCD of 64 GB HBM2E at 191.5 TFLOPS "
                 "FP16/BF16, Infinity Fabric 50 GB/s a x16 link (the low end of 50-100), "
                 "4x Slingshot-11 at 200 Gb/s: 100 GB/s per node",
                 ("peak_tflops", "memory_gb", "intra_node_gbps", "inter_node_gbps")),
}

CONSTANTS: tuple[Constant, ...] = (
    # The NVIDIA presets' shared set (presets/clusters.py NCCL).
    Constant("compute_efficiency", "presets/clusters.py NCCL (NVIDIA presets but v100-32g)",
             _nccl("compute_efficiency"), FIT, GEMM_FIT, fitted_to=GEMM_FIGURES),
    Constant("gemm_half_m", "presets/clusters.py NCCL", _nccl("gemm_half_m"), FIT, GEMM_FIT,
             fitted_to=GEMM_FIGURES),
    Constant("gemm_half_n", "presets/clusters.py NCCL", _nccl("gemm_half_n"), FIT, GEMM_FIT,
             fitted_to=GEMM_FIGURES),
    Constant("msg_half_bytes", "presets/clusters.py NCCL", _nccl("msg_half_bytes"), FIT,
             "the chunk cost a ring step pays, not in NCCL's model: of 0, 8, 16, 32 and 64 KB "
             "the one that missed fewest AMSP checks (benchmarks/chunk_cost_sensitivity.py); "
             "fitted to the checks whose outcome changed over those values",
             fitted_to=CHUNK_FIGURES),
    Constant("intra_node_latency_us", "presets/clusters.py NCCL", _nccl("intra_node_latency_us"),
             SOURCE, "NCCL's tuning model (src/graph/tuning.cc), Simple protocol: hwLat over "
             "NVLink"),
    Constant("inter_node_latency_us", "presets/clusters.py NCCL", _nccl("inter_node_latency_us"),
             SOURCE, "NCCL's tuning model: hwLat over the network"),
    Constant("collective_base_latency_us", "presets/clusters.py NCCL",
             _nccl("collective_base_latency_us"), SOURCE, "NCCL's tuning model: baseLat, a "
             "collective call's fixed cost"),
    # Per-preset constants.
    Constant("v100-32g.compute_efficiency", "presets/clusters.py v100-32g",
             _preset("v100-32g", "compute_efficiency"), FIT,
             "the asymptote with which the shape rule prints Megatron-LM's single-V100 baseline "
             "(a 1.2B GPT at 39 TFLOPS, 30% of peak); set after the stock 0.72 priced the "
             "ZeRO-Offload figure at twice the published TFLOPS",
             fitted_to=("megatron-1.2b-v100-tflops",)),
    *(Constant(f"frontier.{field}", "presets/clusters.py frontier", _preset("frontier", field),
               ASSUMPTION, FRONTIER_ASSUMED, moves=FRONTIER_FIGURES)
      for field in ("compute_efficiency", "gemm_half_m", "gemm_half_n")),
    *(Constant(f"frontier.{field}", "presets/clusters.py frontier", _preset("frontier", field),
               ASSUMPTION, "RCCL on Slingshot: per-step latencies and the chunk cost assumed, "
               "not measured", moves=FRONTIER_FIGURES)
      for field in ("intra_node_latency_us", "inter_node_latency_us", "msg_half_bytes")),
    *(Constant(f"{preset}.{field}", "presets/clusters.py", _preset(preset, field), SOURCE, text)
      for preset, (text, preset_fields) in PRESET_SOURCES.items() for field in preset_fields),
    Constant("runtime_overhead_gb", "presets/clusters.py Cluster (GPU presets' default)",
             _preset("h100-80g", "runtime_overhead_gb"), ASSUMPTION,
             "memory a process holds before the model (CUDA context, allocator, torch); "
             "moves every memory verdict"),
    # The overlap model (costmodel/coefficients.py).
    Constant("overlap_grad", "costmodel/coefficients.py", _coefficient("overlap_grad"), FIT,
             "the share of the backward that hides gradient reduction, read off AMSP Table V's "
             "7B ablation at M = 1 (0.57 with overlap, 0.45 without)",
             fitted_to=("amsp-tablev-7b-m1-all",)),
    Constant("overlap_params", "costmodel/coefficients.py", _coefficient("overlap_params"), FIT,
             "AMSP prefetches weights (§V-C), but crediting it (0.3) made the planner pick "
             "weight-sharded plans for 7B and 13B against Table IV and the sharding-plan "
             "ablation and printed 66% MFU for 7B and 13B: 0 was kept against those figures",
             fitted_to=("amsp-table-iv-7b-plan", "amsp-table-iv-13b-plan",
                        "amsp-7b-1024-amsp-mfu", "amsp-13b-1024-amsp-mfu",
                        "amsp-sharding-plan-ablation")),
    Constant("overlap_broadcast", "costmodel/coefficients.py", _coefficient("overlap_broadcast"),
             SOURCE, "AMSP §VI-A: the broadcast overlap was off in the end-to-end runs (Table V's "
             "first column turns it on, at overlap_grad)"),
    Constant("overlap_grad_deepspeed", "costmodel/coefficients.py",
             _coefficient("overlap_grad_deepspeed"), ASSUMPTION,
             "DeepSpeed's engines hide no gradient reduction: AMSP §III measured them losing "
             "most of their MFU to communication at scale, not this share",
             moves=DEEPSPEED_BASELINES),
    Constant("overlap_params_deepspeed", "costmodel/coefficients.py",
             _coefficient("overlap_params_deepspeed"), ASSUMPTION,
             "DeepSpeed's weight gathers stay exposed, as overlap_params",
             moves=DEEPSPEED_BASELINES),
    Constant("overlap_expert_comm", "costmodel/coefficients.py",
             _coefficient("overlap_expert_comm"), ASSUMPTION,
             "the share of compute that hides the MoE dispatch under Megatron-LM's "
             "--overlap-moe-expert-parallel-comm: overlap_grad's value borrowed, not measured "
             "for this overlap", moves=("deepseek-v3-mfu",)),
    Constant("expert_load_imbalance", "costmodel/coefficients.py",
             _coefficient("expert_load_imbalance"), FIT,
             "the busiest expert rank's load over the mean: with the model's share of the step "
             "that depends on the load (69%), the 3.3% longer dropless step",
             fitted_to=("modelzoo-mixtral-8x22b-dropless-vs-padded",)),
    Constant("bandwidth_efficiency", "costmodel/coefficients.py",
             _coefficient("bandwidth_efficiency"), SOURCE,
             "nccl-tests' bus bandwidth on DGX A100/H100 and Slingshot: 75-85% of the link rate "
             "for large messages"),
    Constant("bucket_bytes", "costmodel/coefficients.py", _coefficient("bucket_bytes"), SOURCE,
             "PyTorch DDP's default bucket_cap_mb = 25"),
    Constant("gather_bucket_bytes", "costmodel/coefficients.py",
             _coefficient("gather_bucket_bytes"), SOURCE,
             "DeepSpeed's allgather_bucket_size default, 5e8 elements of 2 bytes"),
    Constant("launch_overhead_s", "costmodel/coefficients.py", _coefficient("launch_overhead_s"),
             ASSUMPTION, "a fixed cost per layer and micro-batch (kernel launches, Python); "
             "calibration refits it; small against the published steps"),
    # Module constants.
    Constant("FRAGMENTATION_RESERVE", "costmodel/memory.py",
             lambda: memory.FRAGMENTATION_RESERVE, ASSUMPTION,
             "the caching allocator's fragmentation at peak, said to be 5-10%: the middle; "
             "moves every memory verdict, and with it which layout a plan ranks first",
             moves=("mixtral-8x22b-published-layout-rank",)),
    Constant("MEMORY_MARGIN", "costmodel/fit_verdict.py", lambda: fit_verdict.MEMORY_MARGIN,
             FIT, "how far over capacity a predicted layout is risky (measured), not pruned: "
             "the memory model's error by benchmarks/memory_margin.py's rule; it moves no "
             "published figure (each is checked on a layout that fits)",
             fitted_to_rows="benchmarks/memory_margin.py: the corpus rows that report memory "
             "(DLPerf, torchtitan) and the rows that ran with recompute and micro-batch "
             "published"),
    Constant("HOST_RESERVE", "costmodel/offload.py", lambda: offload.HOST_RESERVE, ASSUMPTION,
             "host memory a node keeps for its system and staging buffers"),
    Constant("MEMORY_EFFICIENCY", "costmodel/precision.py", lambda: precision.MEMORY_EFFICIENCY,
             ASSUMPTION, "FP8 casts reach this share of HBM's peak: the low end of 80-90% for "
             "STREAM-like copies", moves=("nemo-llama2-128k-tflops", "deepseek-v3-mfu")),
    Constant("CAST_BYTES", "costmodel/precision.py",
             lambda: ", ".join(f"{k} {v}" for k, v in precision.CAST_BYTES.items()), SOURCE,
             "bytes an element each FP8 recipe's cast kernels move (amax, cast, transposed "
             "copy), counted from the kernels' passes"),
    Constant("TIE_TOLERANCE", "costmodel/amsp.py", lambda: amsp.TIE_TOLERANCE, ASSUMPTION,
             "plans within this share of the step tie, and the least sharded wins; it decides "
             "the 7B and 13B plans of Table IV, each a tie with its runner-up",
             moves=("amsp-table-iv-7b-plan", "amsp-table-iv-13b-plan")),
)

_CONSTANT = {c.name: c for c in CONSTANTS}


def constant(name: str) -> Constant:
    return _CONSTANT[name]


def fitted_by(figure_id: str) -> list[str]:
    """The constants fitted to this figure, or to a figure it is a ratio or ordering of."""
    names = [c.name for c in CONSTANTS if figure_id in c.fitted_to]
    for part in figure(figure_id).parts:
        names += [n for n in fitted_by(part) if n not in names]
    return names


def resting_on(figure_id: str) -> list[str]:
    """The unvalidated constants this figure moves with."""
    return [c.name for c in CONSTANTS if c.kind == ASSUMPTION and figure_id in c.moves]


def role(figure_id: str) -> str:
    if fitted_by(figure_id):
        return FIT_ROLE
    return MISS if figure(figure_id).miss else CHECK


def check(figure_id: str) -> Figure:
    """The figure a published-figure test checks; refused if a constant was fitted to it."""
    fitted = fitted_by(figure_id)
    if fitted:
        raise ValueError(f"{figure_id}: {', '.join(fitted)} fitted to it, so it is a fit, not a "
                         "check; test it with fit() and label it so in docs/costmodel.md")
    return figure(figure_id)


def fit(figure_id: str) -> Figure:
    """A figure a test reproduces as the fit it is: the constants fitted to it still give it."""
    if not fitted_by(figure_id):
        raise ValueError(f"{figure_id}: no constant is fitted to it; test it with check()")
    return figure(figure_id)


def coefficient_fields() -> list[str]:
    return [f.name for f in fields(Coefficients)]
