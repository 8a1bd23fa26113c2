"""Run every context-parallel attention case inside one torchrun launch, for
tests/jobs/test_context_parallel.py.

Usage: torchrun --nproc_per_node=W tests/dist_cp.py OUT.json
For each cp dividing W (2 and W), each comm type and each kv-head count, the ranks form a
(dp, cp) device mesh; every cp group draws its own whole q, k, v (seeded by its dp index),
computes the single-process causal attention and its gradients, then the same through its
shards. OUT.json gets, per case, the largest difference (over all ranks) of the output and of
the q, k, v gradients, each relative to the largest magnitude of the reference tensor.
Two deliberately broken variants show the comparison can fail: "local_mask" builds the causal
mask from local instead of global positions, "contiguous" shards each sequence into cp plain
chunks while the attention assumes head-tail chunks.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

BATCH, SEQ, HEADS, HEAD_DIM = 2, 32, 4, 8


def relative(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a - ref).abs().max() / ref.abs().max()).item()


def run_case(cp_mod, comm: str, kv_heads: int, mesh, variant: str) -> dict:
    cp, rank = mesh["cp"].size(), mesh["cp"].get_local_rank()
    group = mesh["cp"].get_group()
    gen = torch.Generator().manual_seed(1000 + mesh["dp"].get_local_rank())
    q, k, v, w = (torch.randn(BATCH, SEQ, h, HEAD_DIM, generator=gen)
                  for h in (HEADS, kv_heads, kv_heads, HEADS))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = cp_mod.causal_attention(*full)
    (ref * w).sum().backward()

    if variant == "contiguous":
        def shard(x):
            return x.chunk(cp, 1)[rank]
    else:
        def shard(x):
            return cp_mod.shard_sequence(x, cp, rank)
    local = [shard(t).detach().requires_grad_() for t in (q, k, v)]
    out = cp_mod.context_parallel_attention(comm, group)(*local)
    (out * shard(w)).sum().backward()
    diffs = {"out": relative(out, shard(ref))}
    for name, mine, theirs in zip("qkv", local, full):
        diffs[f"d{name}"] = relative(mine.grad, shard(theirs.grad))
    if variant == "ok":  # the whole output through the autograd-aware gather
        diffs["gathered"] = relative(cp_mod.gather_sequence(out, group), ref)
        back = torch.ones_like(out, requires_grad=True)
        cp_mod.gather_sequence(back, group).mul(w).sum().backward()
        diffs["gather_grad"] = relative(back.grad, cp * shard(w))
    return diffs


def broken_mask(original):
    """Local positions (0..local_seq-1) for the queries: the offset of the shard is lost."""
    def mask(q_pos, k_pos):
        return original(torch.arange(len(q_pos), device=q_pos.device), k_pos)
    return mask


def cases(world: int):
    for cp in sorted({2, world}):
        for comm in ("allgather", "a2a", "p2p"):
            for kv_heads in (HEADS, 2, 1):
                yield f"cp{cp}-{comm}-kv{kv_heads}", cp, comm, kv_heads, "ok"
            yield f"cp{cp}-{comm}-contiguous", cp, comm, 2, "contiguous"
            if comm != "a2a":  # Ulysses attends the gathered sequence with a plain causal mask
                yield f"cp{cp}-{comm}-local_mask", cp, comm, 2, "local_mask"


def check_cp_cases(out_path: str) -> None:
    from jobs import context_parallel as cp_mod
    from jobs.shutdown import leave

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    meshes = {cp: init_device_mesh("cpu", (world // cp, cp), mesh_dim_names=("dp", "cp"))
              for cp in sorted({2, world})}
    results, original = {}, cp_mod.causal_mask
    for name, cp, comm, kv_heads, variant in cases(world):
        cp_mod.causal_mask = broken_mask(original) if variant == "local_mask" else original
        diffs = run_case(cp_mod, comm, kv_heads, meshes[cp], variant)
        worst = torch.tensor(list(diffs.values()), dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        results[name] = dict(zip(diffs, worst.tolist()))
    cp_mod.causal_mask = original
    try:  # three query heads do not split over two ranks
        x = torch.zeros(1, SEQ // 2, 3, HEAD_DIM)
        cp_mod.ulysses_attention(x, x, x, meshes[2]["cp"].get_group())
        results["a2a-heads-error"] = None
    except ValueError as exc:
        results["a2a-heads-error"] = str(exc)
    if dist.get_rank() == 0:
        with open(out_path, "w") as out:
            json.dump(results, out, indent=1)
    leave(0)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    check_cp_cases(sys.argv[1])
