"""A small GPT trained with DeepSpeed, written the way a DeepSpeed user writes a training
script: its own arguments plus DeepSpeed's (`--deepspeed_config`), `deepspeed.initialize`, and a
loop of forward, `engine.backward`, `engine.step`. ParaTune tunes it as it is (trial.trainer:
deepspeed); DeepSpeed's own throughput lines are what ParaTune reads.

Runs on CPU (DS_ACCELERATOR=cpu) or GPUs under torchrun:
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 train_gpt.py --deepspeed_config ds.json
`--memory-limit-gb` stands in for a device's memory on CPU: a rank whose peak resident memory
passes it stops with an out-of-memory error, as it would on a GPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2), is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq_len, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens[:, :-1]) + self.pos.weight[: tokens.shape[1] - 1]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def peak_resident_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--memory-limit-gb", type=float, default=None)
    parser.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher's
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    deepspeed.init_distributed()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.hidden, args.layers, args.heads, args.seq_len + 1)
    engine, _, _, _ = deepspeed.initialize(args=args, model=model,
                                           model_parameters=model.parameters())
    micro_batch = engine.train_micro_batch_size_per_gpu()
    generator = torch.Generator().manual_seed(1 + engine.global_rank)
    for step in range(args.steps):
        for _ in range(engine.gradient_accumulation_steps()):
            tokens = torch.randint(0, args.vocab, (micro_batch, args.seq_len + 1), generator=generator)
            loss = engine(tokens.to(engine.device))
            engine.backward(loss)
            engine.step()
        if args.memory_limit_gb and peak_resident_gb() > args.memory_limit_gb:
            raise torch.OutOfMemoryError(
                f"out of memory: peak resident {peak_resident_gb():.2f} GB on rank "
                f"{engine.global_rank} > --memory-limit-gb {args.memory_limit_gb}")
        if engine.global_rank == 0:
            print(f"step={step + 1} loss={loss.item():.4f}", flush=True)
    engine.destroy()
    torch.distributed.destroy_process_group()
    # Leave without the interpreter's teardown: a group the engine still references is freed
    # during finalization, where gloo's threads can abort the process ("terminate called
    # without an active exception", pytorch/pytorch#179291) after training has finished.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
