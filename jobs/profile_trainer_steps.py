"""The profile's trainer steps: the built-in trainer itself, under DDP, FSDP2 and DTensor TP.

The grid of jobs/profile.py times a bare model step, and the collective sweep bare process-group
calls. What a trial adds on top is the trainer's own code: DDP's hooks and bucket copies and
the train loop, FSDP2's per-unit copy-in/copy-out and hooks around each all-gather and
reduce-scatter, DTensor's dispatch and redistribution around each tensor-parallel collective.
None of that is a property of the links or the GEMMs, and on a CPU it is most of a small
trial's time. So the profile also runs `Trainer.step` (jobs/trainer.py, the code trials run)
at one shape of its grid over all ranks, as data parallelism (DDP), as ZeRO-3 (FSDP2) and as
tensor parallelism, and DDP again with the same sequences in smaller micro-batches; the fit
(costmodel/trainer_overhead_fit.py) reads the trainer's compute rate and how it falls with the
micro-batch from the DDP steps, and charges what the cost model cannot explain in the other
two to the runtime's per-collective software cost.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch
import torch.distributed as dist

from jobs.config import JobConfig
from jobs.model import ModelArgs
from jobs.trainer import Infeasible, build_trainer, check_feasible

WARMUP_STEPS = 2
TIMED_STEPS = 8


def layouts(world: int) -> dict[str, dict]:
    """The layouts timed, by name: every rank in one data-parallel or tensor-parallel group."""
    return {"ddp": {"dp": world}, "fsdp": {"dp": world, "zero_stage": 3}, "tp": {"tp": world}}


def micro_batch_splits(micro_batch: int) -> list[int]:
    """Smaller micro-batches the same sequences split into (halving down to one sequence):
    DDP is timed at each too, so the fit reads how the trainer's step grows as the
    micro-batch shrinks (smaller GEMMs, and each micro-batch's fixed cost paid more often)."""
    splits, size = [], micro_batch // 2
    while size >= 1 and micro_batch % size == 0:
        splits.append(size)
        size //= 2
    return splits


def trainer_steps(device: torch.device, args: ModelArgs, tokens_per_rank: int,
                  world: int) -> list[dict]:
    """Median seconds of one `Trainer.step` per layout, each rank computing `tokens_per_rank`
    tokens (DDP and FSDP: its own sequences; TP: the whole micro-batch, its share of the
    width); DDP also with those sequences in smaller micro-batches (`micro_batch_splits`:
    the same trainer, stepped with more accumulation). The layouts take turns step by step,
    so a machine that speeds up or slows down meanwhile moves them alike (the fit reads them
    against each other). A layout the model cannot take (TP over more ranks than heads) is
    skipped."""
    micro_batch = max(1, tokens_per_rank // args.seq_len)
    trainers, batches, rows = {}, {}, {}
    for name, layout in layouts(world).items():
        config = JobConfig(model=args, micro_batch_size=micro_batch, **layout)
        try:
            plan = check_feasible(config, world)
        except Infeasible:
            continue
        trainers[name] = build_trainer(config, plan, device)
        batches[name] = torch.randint(0, args.vocab_size,
                                      (config.global_batch_size, args.seq_len + 1))
        rows[name] = {"layout": name, **layout, "micro_batch_size": micro_batch}
    if "ddp" in trainers:
        for size in micro_batch_splits(micro_batch):
            name, ddp = f"ddp-mbs{size}", trainers["ddp"]
            config = dataclasses.replace(ddp.config, micro_batch_size=size,
                                         grad_accum_steps=micro_batch // size)
            trainers[name] = dataclasses.replace(ddp, config=config)
            batches[name] = batches["ddp"]
            rows[name] = {**rows["ddp"], "micro_batch_size": size,
                          "grad_accum_steps": micro_batch // size}
    samples: dict[str, list[float]] = {name: [] for name in trainers}
    for i in range(WARMUP_STEPS + TIMED_STEPS):  # the same count on every rank
        for name, trainer in trainers.items():
            dist.barrier()
            start = time.perf_counter()
            trainer.step(batches[name])
            if i >= WARMUP_STEPS:
                samples[name].append(time.perf_counter() - start)
    return [{**rows[name], "seconds": statistics.median(samples[name])} for name in trainers]
