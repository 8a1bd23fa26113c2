"""A small mixture-of-experts GPT trained with DeepSpeed: every block's MLP is DeepSpeed's own
`deepspeed.moe.layer.MoE`, its experts split over `--ep` ranks (`ep_size`), each token routed
to `--top-k` of `--experts` experts. Written the way a DeepSpeed MoE user writes it: the
router's auxiliary loss added to the language-model loss, and the parameters split into
DeepSpeed's MoE parameter groups for the optimizer (expert weights are reduced over the
expert-data-parallel group, the rest over all data-parallel ranks), which ZeRO requires.

ParaTune tunes it through `{ep}` in its arguments (examples/deepspeed-moe.yaml) and reads
DeepSpeed's own throughput lines. Runs on CPU (DS_ACCELERATOR=cpu) or GPUs under torchrun:
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 train_moe.py --ep 2 --deepspeed_config ds.json
DeepSpeed's native MoE runs under ZeRO stages 0 to 2 (stage 3 refuses it).
"""

from __future__ import annotations

import argparse
import os
import sys

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F
from deepspeed.moe.layer import MoE
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer


class Expert(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        hidden, self.heads = args.hidden, args.heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.moe = MoE(hidden, Expert(hidden, args.expert_ffn), num_experts=args.experts,
                       ep_size=args.ep, k=args.top_k, capacity_factor=args.capacity_factor,
                       min_capacity=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2), is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, h))
        out, aux_loss, _ = self.moe(self.norm2(x))
        return x + out, aux_loss


class MoEGPT(nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.aux_loss_coeff = args.aux_loss_coeff
        self.embed = nn.Embedding(args.vocab, args.hidden)
        self.pos = nn.Embedding(args.seq_len + 1, args.hidden)
        self.blocks = nn.ModuleList(Block(args) for _ in range(args.layers))
        self.norm, self.head = nn.LayerNorm(args.hidden), nn.Linear(args.hidden, args.vocab,
                                                                    bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens[:, :-1]) + self.pos.weight[: tokens.shape[1] - 1]
        aux = x.new_zeros(())
        for block in self.blocks:
            x, block_aux = block(x)
            aux = aux + block_aux
        logits = self.head(self.norm(x))
        lm_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        return lm_loss + self.aux_loss_coeff * aux


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--expert-ffn", type=int, default=256)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--ep", type=int, default=1, help="expert-parallel ranks (ep_size)")
    parser.add_argument("--capacity-factor", type=float, default=2.0)
    parser.add_argument("--aux-loss-coeff", type=float, default=0.01)
    parser.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher's
    parser = deepspeed.add_config_arguments(parser)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    deepspeed.init_distributed()
    torch.manual_seed(0)
    model = MoEGPT(args)
    groups = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "parameters"})
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=groups)
    micro_batch = engine.train_micro_batch_size_per_gpu()
    generator = torch.Generator().manual_seed(1 + engine.global_rank)
    for step in range(args.steps):
        for _ in range(engine.gradient_accumulation_steps()):
            tokens = torch.randint(0, args.vocab, (micro_batch, args.seq_len + 1),
                                   generator=generator)
            loss = engine(tokens.to(engine.device))
            engine.backward(loss)
            engine.step()
        if engine.global_rank == 0:
            print(f"step={step + 1} loss={loss.item():.4f}", flush=True)
    engine.destroy()
    torch.distributed.destroy_process_group()
    # Leave without the interpreter's teardown, as train_gpt.py does: gloo's threads can abort
    # a process whose groups are freed during finalization (pytorch/pytorch#179291).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
