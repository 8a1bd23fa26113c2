"""A small GPT trained with plain PyTorch DDP, written the way a user writes their own script:
its own flags, `torchrun` for the ranks, one log line per step. ParaTune tunes it as a
`trial.command` (examples/command-ddp.yaml) and reads that line with `trial.log_metrics`.

    torchrun --nproc_per_node 2 train_ddp.py --micro-batch-size 2 --grad-accum-steps 2

Every rank draws its batches from a generator seeded by (seed, rank, step), so a run with the
same flags and world size logs the same losses.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batch-size", type=int, default=1)
    parser.add_argument("--grad-accum-steps", type=int, default=1)
    parser.add_argument("--activation-checkpointing", choices=("none", "full"), default="none")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


class GPT(nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.hidden)
        self.pos = nn.Embedding(args.seq_len, args.hidden)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0,
                                       batch_first=True, norm_first=True)
            for _ in range(args.layers))
        self.head = nn.Linear(args.hidden, args.vocab, bias=False)
        self.checkpointed = args.activation_checkpointing == "full"

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        x = self.embed(inputs) + self.pos.weight[: inputs.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(inputs.shape[1])
        for block in self.blocks:
            if self.checkpointed:
                x = checkpoint(block, x, mask, None, True, use_reentrant=False)
            else:
                x = block(x, src_mask=mask, is_causal=True)
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def batch(args: argparse.Namespace, rank: int, step: int, micro: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007
                                              + step * 101 + micro)
    return torch.randint(0, args.vocab, (args.micro_batch_size, args.seq_len), generator=generator)


def main() -> None:
    args = arguments()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(GPT(args))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens_per_step = args.micro_batch_size * args.grad_accum_steps * args.seq_len * world
    for step in range(args.steps):
        start = time.perf_counter()
        total = 0.0
        for micro in range(args.grad_accum_steps):
            loss = model(batch(args, rank, step, micro)) / args.grad_accum_steps
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mean = torch.tensor([total])
        dist.all_reduce(mean)
        elapsed = time.perf_counter() - start
        peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
        if rank == 0:
            print(f"step {step + 1} loss {mean.item() / world:.4f} "
                  f"tokens/s {tokens_per_step / elapsed:.1f} peak_gb {peak_gb:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
    # DDP's reducer still holds the gloo group, which the interpreter would free during its
    # teardown, where gloo's worker threads can abort the finished run ("terminate called
    # without an active exception", pytorch/pytorch#179291): leave without that teardown.
    sys.stdout.flush()
    os._exit(0)
