"""GPU check: a ~1B LLaMA for 20 steps under each single-GPU mode of the trial job, beside the
cost model's prediction for the same layout.

Modes: bf16 with each recompute and torch.compile; FP8 (torchao's tensorwise and rowwise
Float8Linear) where the device has FP8 tensor cores, else recorded infeasible with the job's
reason; a ~1B mixture of experts (8 experts, top 2); a long-context layout (16,384 tokens, full
recompute). Prints tokens/s, TFLOPS and MFU per mode as a trial reports them, and the cost
model's tokens/s on `--cluster` at one GPU a node. A few minutes on one H100/H200-class GPU.
Run: torchrun --standalone --nproc_per_node=1 benchmarks/gpu_check.py [--cluster h200-141g]
     [--json out.json] [--tiny: a CPU smoke test]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from jobs.config import JobConfig  # noqa: E402
from jobs.model import ModelArgs  # noqa: E402
from jobs.shutdown import leave  # noqa: E402
from jobs.train import pick_device, train  # noqa: E402
from jobs.trainer import Infeasible, check_feasible  # noqa: E402
from orchestrator.costmodel import CostModel  # noqa: E402
from orchestrator.layout import knobs  # noqa: E402
from orchestrator.presets import CLUSTER_PRESETS, ModelShape  # noqa: E402
from orchestrator.space import Layout  # noqa: E402

MODEL_1B = ModelArgs(num_layers=16, hidden=2048, num_heads=16, ffn_hidden=5632,
                     vocab_size=32000, seq_len=2048)
TINY = ModelArgs(num_layers=2, hidden=64, num_heads=4, ffn_hidden=128, vocab_size=256, seq_len=32)
MOE_1B = dataclasses.replace(MODEL_1B, num_layers=8, num_experts=8, experts_per_token=2,
                             moe_ffn_hidden=2816)
LONG_1B = dataclasses.replace(MODEL_1B, seq_len=16384)
TINY_MOE = dataclasses.replace(TINY, num_experts=4, experts_per_token=2)
MODES = {  # mode: (layout and job settings, the ~1B model it trains or None for MODEL_1B)
    "plain": ({}, None),
    "ac_selective": ({"activation_checkpointing": "selective"}, None),
    "ac_full": ({"activation_checkpointing": "full"}, None),
    "compile": ({"compile": True}, None),
    "compile_ac_selective": ({"compile": True, "activation_checkpointing": "selective"}, None),
    "fp8_tensorwise": ({"precision": "fp8-tensorwise", "compile": True}, None),
    "fp8_rowwise": ({"precision": "fp8-rowwise", "compile": True}, None),
    "moe": ({}, "moe"),
    "long_context": ({"activation_checkpointing": "full", "micro_batch_size": 1}, "long"),
}


def predicted_tokens_per_s(config: JobConfig, cluster: str) -> float | None:
    """The cost model's tokens/s for this one-GPU layout; None if it says the layout cannot
    run or fit there."""
    shape = ModelShape(name="gpu-check", **{f.name: getattr(config.model, f.name)
                                            for f in dataclasses.fields(config.model)
                                            if f.name in ModelShape.model_fields})
    layout = Layout(**{k.name: getattr(config, k.name) for k in knobs()})
    estimate = CostModel(shape, CLUSTER_PRESETS[cluster], 1).estimate(layout)
    return estimate.tokens_per_s if estimate.fits else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", default="h100-80g", help="preset the predictions use")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument("--tiny", action="store_true", help="tiny models: a CPU smoke test")
    args = parser.parse_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = pick_device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    models = {None: TINY, "moe": TINY_MOE, "long": dataclasses.replace(TINY, seq_len=256)} \
        if args.tiny else {None: MODEL_1B, "moe": MOE_1B, "long": LONG_1B}
    print(f"device: {name}; predictions: {args.cluster}")
    rows = [run_mode(mode, models, args, device) for mode in args.modes.split(",")]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": name, "rows": rows}, fh, indent=1)
    leave(0)


def run_mode(mode: str, models: dict, args, device) -> dict:
    settings, model = MODES[mode]
    settings = {"micro_batch_size": args.micro_batch_size, **settings}
    config = JobConfig(model=models[model], steps=args.steps, warmup_steps=3,
                       peak_tflops=CLUSTER_PRESETS[args.cluster].peak_tflops, **settings)
    predicted = predicted_tokens_per_s(config, args.cluster)
    try:
        plan = check_feasible(config, 1)
    except Infeasible as reason:  # the job's own reason, as a trial records it
        print(f"{mode:22s} infeasible: {reason}", flush=True)
        return {"mode": mode, "infeasible": str(reason), "predicted_tokens_per_s": predicted}
    start = time.perf_counter()
    result = train(config, plan, device)
    row = {"mode": mode, "tokens_per_s": result.tokens_per_s,
           "predicted_tokens_per_s": predicted, "tflops_per_gpu": result.tflops_per_gpu,
           "mfu": result.mfu, "step_time_s": result.step_time_s,
           "peak_memory_gb": result.peak_memory_gb, "loss_first": result.loss_first,
           "loss_last": result.loss_last, "wall_s": time.perf_counter() - start}
    shown = f"{predicted:10,.0f}" if predicted else "   no fit"
    print(f"{mode:22s} {row['tokens_per_s']:10,.0f} tok/s (model {shown}) "
          f"{row['tflops_per_gpu']:7.1f} TFLOPS MFU {row['mfu']:6.1%} "
          f"step {row['step_time_s'] * 1e3:7.1f} ms peak {row['peak_memory_gb']:5.1f} GB "
          f"loss {row['loss_first']:.3f}->{row['loss_last']:.3f} ({row['wall_s']:.0f} s)",
          flush=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    return row


if __name__ == "__main__":
    main()
