"""GPU check: a ~1B LLaMA for 20 steps in bf16 under each single-GPU mode of the trial job.

Prints tokens/s, TFLOPS and MFU per mode, measured by the job's own train path, so it shows
what a trial reports on a real accelerator. Runs in a few minutes on one H100/H200-class GPU.
Run: torchrun --standalone --nproc_per_node=1 benchmarks/gpu_check.py [--peak-tflops 989]
"""

from __future__ import annotations

import argparse
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
from jobs.trainer import check_feasible  # noqa: E402

MODEL_1B = ModelArgs(num_layers=16, hidden=2048, num_heads=16, ffn_hidden=5632,
                     vocab_size=32000, seq_len=2048)
TINY = ModelArgs(num_layers=2, hidden=64, num_heads=4, ffn_hidden=128, vocab_size=256, seq_len=32)
MODES = {
    "plain": {},
    "ac_selective": {"activation_checkpointing": "selective"},
    "ac_full": {"activation_checkpointing": "full"},
    "compile": {"compile": True},
    "compile_ac_selective": {"compile": True, "activation_checkpointing": "selective"},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument("--tiny", action="store_true", help="a tiny model: a CPU smoke test")
    args = parser.parse_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = pick_device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    model = TINY if args.tiny else MODEL_1B
    print(f"device: {name}; model: {model}")
    rows = []
    for mode in args.modes.split(","):
        settings = MODES[mode]
        config = JobConfig(model=model, micro_batch_size=args.micro_batch_size,
                           steps=args.steps, warmup_steps=3, peak_tflops=args.peak_tflops,
                           **settings)
        start = time.perf_counter()
        result = train(config, check_feasible(config, 1), device)
        row = {"mode": mode, "tokens_per_s": result.tokens_per_s,
               "tflops_per_gpu": result.tflops_per_gpu, "mfu": result.mfu,
               "step_time_s": result.step_time_s, "peak_memory_gb": result.peak_memory_gb,
               "loss_first": result.loss_first, "loss_last": result.loss_last,
               "wall_s": time.perf_counter() - start}
        rows.append(row)
        print(f"{mode:22s} {row['tokens_per_s']:10,.0f} tok/s {row['tflops_per_gpu']:7.1f} TFLOPS "
              f"MFU {row['mfu']:6.1%}  step {row['step_time_s'] * 1e3:7.1f} ms  "
              f"peak {row['peak_memory_gb']:5.1f} GB  loss {row['loss_first']:.3f}->{row['loss_last']:.3f}"
              f"  ({row['wall_s']:.0f} s)", flush=True)
        torch.cuda.empty_cache() if device.type == "cuda" else None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": name, "rows": rows}, fh, indent=1)
    leave(0)


if __name__ == "__main__":
    main()
