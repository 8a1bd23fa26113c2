"""The published figures the cost model is judged on, each with an id its tests and docs use.

A figure names the peak an MFU is a share of, the figures it is a ratio or ordering of (a fit
if any of them is: constants_provenance.py), and, for a documented miss, why the model misses
it (its test is a strict xfail carrying the figure).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    id: str
    what: str
    published: str
    peak: str = ""  # the peak an MFU or TFLOP/s figure is counted against
    parts: tuple[str, ...] = ()  # the figures this one is a ratio or an ordering of
    miss: str = ""  # why the model misses it (its test is a strict xfail)


THIRTY_B_M8_MISS = ("with every layer recomputed (the paper does not say how many), the plan's "
                    "exposed weight gathers and broadcast leave it more than 0.06 low")
A800, A100 = "BF16 dense, 312 TFLOPS", "BF16/FP16 dense, 312 TFLOPS"
H100, H800 = "BF16 dense, 989 TFLOPS", "BF16 dense, 989 TFLOPS (the GEMMs run FP8)"
MI250X = "BF16 dense, 191.5 TFLOPS a GCD"

FIGURES: tuple[Figure, ...] = (
    # AMSP (arXiv 2311.00257) §VI-B, 1,024 A800s, MFU.
    Figure("amsp-7b-1024-amsp-mfu", "AMSP 7B, AMSP's plan, 1,024 A800s, MFU", "51%", A800),
    Figure("amsp-13b-1024-amsp-mfu", "AMSP 13B, AMSP's plan, 1,024 A800s, MFU", "52%", A800),
    Figure("amsp-30b-1024-amsp-mfu", "AMSP 30B, AMSP's plan, 1,024 A800s, MFU", "42%", A800),
    Figure("amsp-7b-1024-mics-mfu", "AMSP 7B, MiCS (8,1), 1,024 A800s, MFU", "35%", A800),
    Figure("amsp-13b-1024-mics-mfu", "AMSP 13B, MiCS (8,1), 1,024 A800s, MFU", "33%", A800,
           miss="DeepSpeed's host cost per gathered module is not priced (Known limits)"),
    Figure("amsp-30b-1024-mics-mfu", "AMSP 30B, MiCS (8,2), 1,024 A800s, MFU", "29%", A800),
    Figure("amsp-7b-1024-zeropp-mfu", "AMSP 7B, ZeRO++, 1,024 A800s, MFU", "4%", A800),
    Figure("amsp-13b-1024-zeropp-mfu", "AMSP 13B, ZeRO++, 1,024 A800s, MFU", "6%", A800),
    Figure("amsp-30b-1024-zeropp-mfu", "AMSP 30B, ZeRO++, 1,024 A800s, MFU", "5%", A800),
    Figure("amsp-7b-1024-zero1-mfu", "AMSP 7B, ZeRO-1, 1,024 A800s, MFU", "36%", A800),
    Figure("amsp-7b-1024-zero3-mfu", "AMSP 7B, ZeRO-3, 1,024 A800s, MFU", "~4%", A800),
    *(Figure(f"amsp-{m}-1024-ordering", f"AMSP {m.upper()}: AMSP > MiCS > ZeRO++ > ZeRO-3 at "
             "1,024 A800s", "ordering", A800,
             parts=(f"amsp-{m}-1024-amsp-mfu", f"amsp-{m}-1024-mics-mfu"))
      for m in ("7b", "13b", "30b")),
    # AMSP §III and §VI-B: 8 -> 1,024 GPUs at the same 4M-token batch.
    Figure("amsp-7b-8gpu-amsp-mfu", "AMSP 7B, AMSP's (1,1,8) plan, 8 A800s, MFU", "64%", A800),
    Figure("amsp-7b-kept", "AMSP 7B keeps its MFU from 8 to 1,024 GPUs (>= 75%)", "80%",
           parts=("amsp-7b-8gpu-amsp-mfu", "amsp-7b-1024-amsp-mfu")),
    Figure("amsp-13b-kept", "AMSP 13B keeps its MFU from 8 to 1,024 GPUs (>= 75%)",
           "~85% (all models)", parts=("amsp-13b-1024-amsp-mfu",)),
    Figure("amsp-13b-8gpu-zero3-mfu", "AMSP 13B, ZeRO-3, 8 A800s, MFU", "47%", A800,
           miss="5.6 points high (52.6% against 47%), first checked with an id; the cause "
           "is not traced"),
    Figure("amsp-13b-1024-zero3-mfu", "AMSP 13B, ZeRO-3, 1,024 A800s, MFU (< 15%)", "4%", A800),
    Figure("amsp-7b-8gpu-zero1-mfu", "AMSP 7B, ZeRO-1, 8 A800s, MFU", "63%", A800),
    Figure("amsp-7b-8gpu-mics-mfu", "AMSP 7B, MiCS, 8 A800s, MFU", "50%", A800),
    Figure("amsp-sharding-plan-ablation", "AMSP's plan over a MiCS-style plan on its own "
           "engine, 1,024 GPUs", "1.3x / 1.1x / 1.13x"),
    # AMSP Table V, 64 A800s: MFU with every overlap and with none, M = 1 and 8.
    *(Figure(f"amsp-tablev-{m}-m{k}-{column}",
             f"AMSP Table V {m.upper()}, M = {k}, {'all overlap' if column == 'all' else 'none'}",
             published, A800,
             miss=(THIRTY_B_M8_MISS if (m, k) == ("30b", 8) else ""))
      for m, k, column, published in (
          ("7b", 1, "all", "0.57"), ("7b", 1, "none", "0.45"), ("7b", 8, "all", "0.67"),
          ("7b", 8, "none", "0.63"), ("13b", 1, "all", "0.53"), ("13b", 1, "none", "0.42"),
          ("13b", 8, "all", "0.62"), ("13b", 8, "none", "0.46"), ("30b", 1, "all", "0.48"),
          ("30b", 1, "none", "0.33"), ("30b", 8, "all", "0.51"), ("30b", 8, "none", "0.42"))),
    # AMSP Table IV plans.
    Figure("amsp-table-iv-7b-plan", "AMSP Table IV, 7B plan", "(1,1,1,1,8,1)"),
    Figure("amsp-table-iv-13b-plan", "AMSP Table IV, 13B plan", "(4,1,4,1,8,1)"),
    Figure("amsp-table-iv-30b-plan", "AMSP Table IV, 30B plan within 2% of the model's pick",
           "(8,1,8,1,8,4)"),
    # Megatron-LM and Frontier.
    Figure("megatron-1t-hfu", "Megatron-LM GPT 1T, 3,072 A100s, HFU (Narayanan et al. 2021)",
           "52%", A100),
    Figure("megatron-1.2b-v100-tflops", "Megatron-LM's single-V100 baseline, a 1.2B GPT "
           "(Shoeybi et al. 2019, §5)", "39 TFLOPS (30%)", "FP16 dense, 125 TFLOPS"),
    Figure("frontier-175b-mfu", "Frontier 175B, 1,024 GCDs, MFU (Dash et al.)", "36.1%", MI250X),
    Figure("frontier-1t-mfu", "Frontier 1T, 3,072 GCDs, MFU", "32.0%", MI250X),
    Figure("frontier-175b-weak-scaling", "Frontier 175B weak scaling, 128 -> 1,024 GCDs", "100%"),
    Figure("frontier-1t-weak-scaling", "Frontier 1T weak scaling, 768 -> 3,072 GCDs", "100%"),
    Figure("frontier-175b-strong-scaling", "Frontier 175B strong scaling", "89%"),
    Figure("frontier-1t-strong-scaling", "Frontier 1T strong scaling", "87%"),
    # Mixture of experts.
    Figure("moe-folding-mixtral-8x22b-mfu", "MoE Parallel Folding, Mixtral 8x22B, 128 H100s, "
           "MFU (causal attention half)", "49.3%", H100),
    Figure("moe-folding-qwen2-57b-mfu", "MoE Parallel Folding, Qwen2-57B-A14B, 64 H100s, MFU "
           "(causal attention half)", "39.0%", H100,
           miss="it prints 46.4%, 7.4 points high: the distributed optimizer's collectives hide "
           "behind its 7 interleaved chunks, and the last stage's output layer (a 151,936 "
           "vocabulary, about 11% more step) is spread over all stages"),
    Figure("megatron-estimator-moe-memory", "Megatron-LM's memory estimator: Mixtral 8x22B and "
           "Qwen2-57B-A14B weights and optimizer states per GPU", "5.04 / 13.29 / 8.46 / "
           "10.97 GB"),
    Figure("mixtral-8x22b-published-layout-rank", "Mixtral 8x22B: the published layout in the "
           "plan's top 5", "TP 2, PP 8, EP 8", miss="it ranks 7th, 4.8% below the plan's best: "
           "with the distributed optimizer's collectives hidden chunk by chunk, the plan "
           "prefers TP 4 at 7 interleaved chunks"),
    Figure("modelzoo-mixtral-8x22b-dropless-vs-padded", "Megatron-MoE-ModelZoo Mixtral 8x22B "
           "on H100s, dropless against capacity-padded routing", "455 / 470 TFLOPS", H100),
    Figure("deepseek-v3-mfu", "DeepSeek-V3, 2,048 H800s, MFU implied by 180K GPU-hours per "
           "trillion tokens", "38.6%", H800),
    # Context parallelism.
    *(Figure(f"llama3-405b-{tag}-tflops", f"Llama 3 405B Table 4, {what}, TFLOP/s per GPU",
             published, "none: TFLOP/s of a BF16 run", miss=(
                 "at the least favourable plausible settings (full recompute, 2 virtual "
                 "stages) it prints more than 10% low"))
      for tag, what, published in (("8k-8192", "8,192 GPUs, seq 8,192", "430"),
                                   ("8k-16384", "16,384 GPUs, seq 8,192", "400"),
                                   ("128k-16384", "16,384 GPUs, CP 16, seq 131,072", "380"))),
    Figure("llama3-405b-ordering", "Llama 3 405B Table 4: 430 > 400 > 380", "ordering",
           parts=("llama3-405b-8k-8192-tflops", "llama3-405b-8k-16384-tflops",
                  "llama3-405b-128k-16384-tflops"),
           miss="with 2 virtual stages the 8K row at 16,384 GPUs prints below the 128K row"),
    Figure("nemo-llama2-128k-tflops", "NeMo long-sequence table, Llama 2 7B FP8, 128K on 128 "
           "H100s, model TFLOPS per GPU", "555", "none: TFLOPS of an FP8 run",
           miss="with full recompute (the recompute is not published) it prints 22% low"),
    # FP8 and offload.
    Figure("torchtitan-float8-gain", "torchtitan Llama 3.1 8B, 8 H100s: Float8 over bf16 "
           "tokens/s", "1.28", miss="the model puts the published layout at 120 GB of 96 "
           "(selective recompute's activations): it does not fit"),
    Figure("zero-offload-10b-iteration", "ZeRO-Offload 10B GPT-2, one V100, batch 10: seconds "
           "an iteration", "25.7-26.8", miss="the model puts the published layout at 33.9 GB "
           "of 32 (activation checkpoints kept on the host are not a knob): it does not fit"),
    Figure("zero-offload-10b-tflops", "ZeRO-Offload 10B GPT-2, one V100, batch 512: TFLOPS, "
           "recompute counted", "~41", "none: TFLOPS (HFU x the FP16 peak, 125)",
           miss="the layout does not fit in the model, as at batch 10"),
)

_FIGURE = {f.id: f for f in FIGURES}


def figure(figure_id: str) -> Figure:
    try:
        return _FIGURE[figure_id]
    except KeyError:
        raise KeyError(f"{figure_id}: no such figure in published_figures.FIGURES") from None
