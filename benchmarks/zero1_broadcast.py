"""The built-in trainer's ZeRO-1 optimizer step: per-parameter broadcasts against bucket views.

After its sharded AdamW step, PyTorch's ZeroRedundancyOptimizer sends each rank's updated
weights to the others. Without `parameters_as_bucket_view` it broadcasts them one parameter
tensor at a time; with it, one flat buffer per rank. On a link with a high per-call cost
(gloo on a CPU) the first cost more than sharding the optimizer saved. This times one
optimizer step of the trainer's model three ways over all ranks: plain AdamW (what DDP runs),
ZeRO per parameter, ZeRO with bucket views (what jobs/parallelize.py builds).

Run: .venv/bin/torchrun --nproc-per-node 2 benchmarks/zero1_broadcast.py [--width 256]
     (about 20 s here; results in docs/costmodel.md)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from jobs.model import Transformer
from jobs.profile import profile_model

WARMUP, TIMED, ROUNDS = 5, 20, 2
VARIANTS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-4),
    "zero1_per_parameter": lambda params: ZeroRedundancyOptimizer(
        params, optimizer_class=torch.optim.AdamW, lr=1e-4),
    "zero1_bucket_view": lambda params: ZeroRedundancyOptimizer(
        params, optimizer_class=torch.optim.AdamW, lr=1e-4, parameters_as_bucket_view=True),
}


def step_ms(make, width: int) -> tuple[float, int]:
    """Median milliseconds of one optimizer step, and the number of parameter tensors."""
    torch.manual_seed(0)
    params = list(Transformer(profile_model(width, 128)).parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = make(params)
    samples = []
    for i in range(WARMUP + TIMED):
        dist.barrier()
        start = time.perf_counter()
        optimizer.step()
        if i >= WARMUP:
            samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3, len(params)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=256, help="the profile model's hidden size")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    tensors = 0
    for _ in range(ROUNDS):  # the variants take turns, so a machine slowing moves them alike
        for name, make in VARIANTS.items():
            ms, tensors = step_ms(make, args.width)
            results[name].append(round(ms, 2))
    if dist.get_rank() == 0:
        print(json.dumps({"world_size": dist.get_world_size(), "width": args.width,
                          "parameter_tensors": tensors, "step_ms": results}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
