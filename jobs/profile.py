"""The profiling job `paratune profile` submits: GEMM speed by shape, collective time by size.

Run under torchrun like a trial (`torchrun --nproc_per_node=W -m jobs.profile`). Every rank
times fp32 (CPU) or bf16 (GPU) forward and backward passes of a layer's GEMMs at m tokens and
width n at once, as a trial's ranks share the machine; then the ranks time all-reduce and
all-gather over groups of consecutive ranks, for message sizes from 4 KB to 16 MB: every size
that divides the ranks of a node, and on several nodes every multiple of a node that divides
the world (each row says how many nodes its group spans). Rank 0 writes a trial result whose
`extra.profile` holds the measurements; the cost model's fit (costmodel/profile_fit.py) turns
them into a cluster preset. As Galvatron and Alpa profile before they plan.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from jobs.shutdown import leave
from orchestrator.result import TrialResult

ROWS = (16, 64, 256, 1024)
COLUMNS = (16, 64, 256, 1024)
SIZES = tuple(4096 * 4**i for i in range(7))  # 4 KB .. 16 MB


def timed(fn, min_time_s: float = 0.02, repeats: int = 5) -> float:
    """Median seconds of one call, each sample long enough to time."""
    fn()
    calls, start = 1, time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, int(min_time_s / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def layer_rates(device: torch.device, dtype: torch.dtype) -> list[dict]:
    """Forward and backward of one LLaMA-style layer's linear work at m tokens and width n
    (QKV and output projections, gated MLP of 8n/3, two norms, SiLU, residuals): the kernels
    a trial's step is made of, with autograd, at the shapes the cost model keys on. FLOPs are
    counted as the cost model counts them: 3 × 2·m·(4n² + 3·n·f)."""
    out = []
    for m in ROWS:
        for n in COLUMNS:
            f = max(1, round(8 * n / 3))
            x = torch.randn(m, n, device=device, dtype=dtype, requires_grad=True)
            qkv, proj = torch.nn.Linear(n, 3 * n, bias=False), torch.nn.Linear(n, n, bias=False)
            up, down = torch.nn.Linear(n, 2 * f, bias=False), torch.nn.Linear(f, n, bias=False)
            for layer in (qkv, proj, up, down):
                layer.to(device=device, dtype=dtype)

            def run(x=x, qkv=qkv, proj=proj, up=up, down=down, n=n, f=f):
                h = torch.nn.functional.layer_norm(x, (n,))
                o = x + proj(qkv(h)[:, :n])
                gate, value = up(torch.nn.functional.layer_norm(o, (n,))).split(f, dim=1)
                (o + down(torch.nn.functional.silu(gate) * value)).sum().backward()
                if device.type == "cuda":
                    torch.cuda.synchronize()

            seconds = timed(run)
            flops = 3 * 2 * m * (4 * n * n + 3 * n * f)
            out.append({"m": m, "n": n, "tflops": flops / seconds / 1e12})
    return out


def group_sizes(world: int, per_node: int) -> list[int]:
    """Sizes of groups that fill whole nodes or sit inside one (ranks are node-major)."""
    return [p for p in range(2, world + 1)
            if world % p == 0 and (per_node % p == 0 or p % per_node == 0)]


def collective_times(device: torch.device, world: int, per_node: int) -> list[dict]:
    out = []
    rank = dist.get_rank()
    for size in group_sizes(world, per_node):
        groups = [dist.new_group(list(range(g, g + size))) for g in range(0, world, size)]
        group = groups[rank // size]
        for nbytes in SIZES:
            numel = nbytes // 4
            x = torch.ones(numel, device=device)
            gathered = [torch.empty(numel // size, device=device) for _ in range(size)]
            chunk = x[: numel // size].contiguous()
            ops = {"all_reduce": lambda: dist.all_reduce(x, group=group),
                   "all_gather": lambda: dist.all_gather(gathered, chunk, group=group)}
            calls = max(2, min(50, 2**24 // nbytes))  # the same count on every rank
            for op, fn in ops.items():
                fn()
                samples = []
                for _ in range(3):
                    dist.barrier()
                    start = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    samples.append((time.perf_counter() - start) / calls)
                seconds = statistics.median(samples)
                out.append({"op": op, "group": size, "nodes": max(1, size // per_node),
                            "bytes": nbytes, "seconds": seconds})
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    dist.barrier()
    layers = layer_rates(device, dtype)
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    collectives = collective_times(device, world, per_node)
    if rank == 0:
        result = TrialResult(status="ok", world_size=world, extra={"profile": {
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "world_size": world, "ranks_per_node": per_node, "nodes": world // per_node,
            "dtype": str(dtype), "layers": layers,
            "collectives": collectives}})
        with open(os.environ["PARATUNE_RESULT_FILE"], "w") as f:
            json.dump(result.to_dict(), f)
    leave(0)


if __name__ == "__main__":
    main()
