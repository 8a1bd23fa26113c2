"""The profiling job `paratune profile` submits: model steps by shape, collective time by size.

Run under torchrun like a trial (`torchrun --nproc_per_node=W -m jobs.profile`). Every rank
times fp32 (CPU) or bf16 (GPU) training steps (forward, loss, backward) of the built-in
trainer's LLaMA at m tokens and width n, and an AdamW step over its weights, at once, as a
trial's ranks share the machine; then the ranks time all-reduce and all-gather over groups
of consecutive ranks, for message sizes from 4 KB to 16 MB: every size that divides the
ranks of a node, and on several nodes every multiple of a node that divides the world (each
row says how many nodes its group spans); with two ranks or more, it also times the built-in
trainer's own step as DDP, ZeRO-3 and TP (jobs/profile_trainer_steps.py). Rank 0 writes a trial
result whose `extra.profile` holds the measurements; the cost model's fit
(costmodel/profile_fit.py) turns them into a cluster preset. As Galvatron and Alpa profile
before they plan.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from jobs.model import ModelArgs, Transformer, num_params
from jobs.profile_trainer_steps import trainer_steps
from jobs.shutdown import leave
from orchestrator.result import TrialResult, training_flops_per_iteration

# Tokens per rank (m) and width (n) the compute grid times, by device: the shapes trials on
# it run (a CPU trains models a few hundred wide at a few hundred tokens; a GPU thousands).
GRIDS = {"cpu": ((64, 128, 256, 512), (64, 128, 256)),
         "cuda": ((512, 1024, 2048, 4096, 8192), (512, 1024, 2048, 4096))}
SIZES = tuple(4096 * 4**i for i in range(7))  # 4 KB .. 16 MB
PROFILE_LAYERS = 4  # the built-in trainer's tiny model's depth
HEAD_DIM = 64
FFN_MULTIPLE = 16
VOCAB_PER_WIDTH = 8  # LLaMA's 32,000 over 4,096; the tiny model's 2,048 over 256


def timed(fn, min_time_s: float = 0.02, repeats: int = 5) -> float:
    """Median seconds of one call, each sample long enough to time (three samples of a call
    that alone takes a tenth of a second: its own length keeps noise down)."""
    fn()
    calls, start = 1, time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, int(min_time_s / once))
    samples = []
    for _ in range(repeats if once < 0.1 else 3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def grid(device: torch.device) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (m, n) values this device's compute grid times."""
    return GRIDS["cuda" if device.type == "cuda" else "cpu"]


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels, so a timing covers them."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def profile_model(n: int, seq_len: int) -> ModelArgs:
    """The trainer's LLaMA at width n: heads of 64, a SwiGLU of 8n/3 (to a multiple of 16, so
    tensor parallelism over up to 16 ranks splits it), a vocabulary of 8n."""
    ffn = max(FFN_MULTIPLE, FFN_MULTIPLE * round(8 * n / 3 / FFN_MULTIPLE))
    return ModelArgs(num_layers=PROFILE_LAYERS, hidden=n, num_heads=max(1, n // HEAD_DIM),
                     ffn_hidden=ffn, vocab_size=VOCAB_PER_WIDTH * n,
                     seq_len=seq_len)


def model_rates(device: torch.device, dtype: torch.dtype, seq_len: int) -> list[dict]:
    """Forward, loss and backward of the built-in trainer's model (jobs/model.py: embedding,
    RMSNorm, rotary attention, SwiGLU, logits, cross-entropy) at m tokens per rank and width
    n, in sequences of min(m, seq_len): a trial's step, not only its GEMMs, so the fitted
    efficiency holds the attention, element-wise and loss kernels and their per-op cost as
    MFU does. FLOPs are counted as the cost model counts them (orchestrator.result)."""
    rows, columns = grid(device)
    out = []
    for n in columns:
        for m in rows:
            seq = min(m, seq_len)
            args = profile_model(n, seq)
            with device:  # built where it runs: a GPU grid's largest model has 1B weights
                model = Transformer(args).to(dtype=dtype)
            tokens = torch.randint(0, args.vocab_size, (max(1, m // seq), seq), device=device)

            def step(model=model, tokens=tokens):
                logits = model(tokens)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                         tokens.flatten())
                loss.backward()
                synchronize(device)

            seconds = timed(step)
            model.zero_grad(set_to_none=True)
            flops = training_flops_per_iteration(
                tokens=tokens.numel(), seq_len=seq, num_layers=args.num_layers, hidden=n,
                vocab_size=args.vocab_size, ffn_hidden=args.ffn_hidden, gated_mlp=True)
            out.append({"m": tokens.numel(), "n": n, "seq_len": seq,
                        "tflops": flops / seconds / 1e12})
    return out


def optimizer_rate(device: torch.device, seq_len: int) -> dict:
    """Seconds of one AdamW step (torch's default implementation, as the trainer builds it)
    over the weights of the profile's model at the grid's middle width: the optimizer's
    memory-bound pass over weights, gradients and moments, which no FLOP count sees."""
    columns = grid(device)[1]
    with device:
        model = Transformer(profile_model(columns[len(columns) // 2], seq_len))
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.AdamW(params, lr=1e-4)

    def step():
        optimizer.step()
        synchronize(device)

    return {"params": num_params(model), "seconds": timed(step)}


def runtime_rates(device: torch.device, seq_len: int, world: int) -> dict:
    """The trainer's step by layout (jobs/profile_trainer_steps.py) at the grid's widest n and
    middle m: the width nearest what campaigns on this device train (a CPU's `tiny` model is
    256 wide), where the loop's fixed costs weigh least against the compute."""
    rows, columns = grid(device)
    n, m = columns[-1], rows[len(rows) // 2]
    args = profile_model(n, min(m, seq_len))
    return {"model": dataclasses.asdict(args), "tokens_per_rank": m,
            "steps": trainer_steps(device, args, m, world)}


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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq-len", type=int, default=2048,
                        help="the sequence length of the campaigns the preset is for")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    dist.barrier()
    layers = model_rates(device, dtype, args.seq_len)
    optimizer = optimizer_rate(device, args.seq_len)
    runtime = runtime_rates(device, args.seq_len, world) if world > 1 else None
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    collectives = collective_times(device, world, per_node)
    if rank == 0:
        result = TrialResult(status="ok", world_size=world, extra={"profile": {
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "world_size": world, "ranks_per_node": per_node, "nodes": world // per_node,
            "dtype": str(dtype), "seq_len": args.seq_len, "layers": layers,
            "optimizer": optimizer, "runtime": runtime,
            "collectives": collectives}})
        with open(os.environ["PARATUNE_RESULT_FILE"], "w") as f:
            json.dump(result.to_dict(), f)
    leave(0)


if __name__ == "__main__":
    main()
