"""The built-in trial: train the LLaMA-style model under one layout and report what it measured.

Run under torchrun (`torchrun --nproc_per_node=W -m jobs.train --config trial.json`). Every rank
trains; rank 0 writes the trial-result JSON to `--result-file` (or $PARATUNE_RESULT_FILE). A
failure on any rank is written by that rank (`oom` or `failed`, with the error), which then
exits non-zero so torchrun tears the others down.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from jobs.config import JobConfig, parse_config
from jobs.faults import maybe_inject_fault
from jobs.mechanisms import attention_forwards, compiled_graphs, optimizer_state_fraction
from jobs.model import Transformer, num_params
from jobs.shutdown import leave
from jobs.trainer import Infeasible, build_trainer, check_feasible
from orchestrator.result import PHASE_LINE, TrialResult, model_flops_per_iteration


def synthetic_batch(config: JobConfig, step: int) -> torch.Tensor:
    """The global batch of one step: (global_batch, seq_len + 1) tokens, same for any layout.

    Each sequence counts up from a random start by a random stride, so the loss can fall.
    """
    gen = torch.Generator().manual_seed(config.seed * 100_003 + step)
    n, s, v = config.global_batch_size, config.model.seq_len + 1, config.model.vocab_size
    start = torch.randint(0, v, (n, 1), generator=gen)
    stride = torch.randint(1, 8, (n, 1), generator=gen)
    return (start + stride * torch.arange(s)) % v


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux


class MemoryCapExceeded(torch.OutOfMemoryError):
    """A rank passed --memory-limit-gb: reported as `oom`, like a device out-of-memory."""


def enforce_memory_cap(config: JobConfig, device: torch.device) -> None:
    if config.memory_limit_gb is None:
        return
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory / 1e9
        torch.cuda.set_per_process_memory_fraction(min(1.0, config.memory_limit_gb / total), device)
    elif peak_memory_gb(device) > config.memory_limit_gb:
        raise MemoryCapExceeded(
            f"peak RSS {peak_memory_gb(device):.2f} GB > memory_limit_gb={config.memory_limit_gb:g}"
        )


def say_phase(text: str) -> None:
    """One `paratune phase:` line in the trial log (rank 0), shown live while the trial runs."""
    if dist.get_rank() == 0:
        print(f"{PHASE_LINE}{text}", flush=True)


def phase_at(config: JobConfig, step: int) -> str | None:
    """The phase a step starts, if it starts one."""
    if step == 0 and config.warmup_steps:
        compiles = "; the first step compiles (torch.compile)" if config.compile else ""
        return f"warm-up, {config.warmup_steps} steps{compiles}"
    if step == config.warmup_steps:
        return f"timed, {config.steps} steps"
    return None


def train(config: JobConfig, plan, device: torch.device) -> TrialResult:
    world = dist.get_world_size()
    enforce_memory_cap(config, device)
    say_phase("building the model and its layout")
    trainer = build_trainer(config, plan, device)
    held = trainer.held_parameter_fraction()
    step_times, losses = [], []
    forwards, last = [0, 0, 0], config.warmup_steps + config.steps - 1
    for step in range(last + 1):
        if phase := phase_at(config, step):
            say_phase(phase)
        maybe_inject_fault(config, step)
        batch = synthetic_batch(config, step)
        synchronize(device)
        start = time.perf_counter()
        # The last step is watched (a first step may run extra passes to set up).
        with attention_forwards(trainer.modules) if step == last else nullcontext(forwards) as seen:
            loss = trainer.step(batch)
        forwards = seen
        synchronize(device)
        elapsed = time.perf_counter() - start
        enforce_memory_cap(config, device)
        losses.append(loss)
        if step >= config.warmup_steps:
            step_times.append(elapsed)

    # The slowest rank sets the pace: take the max of each step's time over ranks.
    times = torch.tensor(step_times, dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    memory = torch.tensor([peak_memory_gb(device)], dtype=torch.float64, device=device)
    dist.all_reduce(memory, op=dist.ReduceOp.MAX)
    result = summarize(config, times.tolist(), losses, memory.item(), world)
    result.extra["held_parameter_fraction"] = held
    result.extra.update(measured_mechanisms(config, trainer, forwards))
    if plan.approximation:
        result.extra["approximation"] = plan.approximation
    return result


def measured_mechanisms(config: JobConfig, trainer, forwards: list[int]) -> dict[str, float]:
    """What the layout did on this rank (jobs/mechanisms.py), for the mode tests."""
    calls, layers, tokens = forwards
    with torch.device("meta"):
        whole = num_params(Transformer(config.model))
    return {"optimizer_state_fraction": optimizer_state_fraction(trainer.optimizer, whole),
            "attention_forwards_per_microbatch":
                calls / (layers * config.grad_accum_steps) if layers else 0.0,
            "compiled_graphs": compiled_graphs(), "attention_sequence_length": tokens,
            # The gradient bucket DDP was built with (bucket_size's bytes), 0 without DDP.
            "ddp_bucket_cap_bytes": trainer.ddp.bucket_bytes_cap if trainer.ddp else 0}


def summarize(
    config: JobConfig, step_times: list[float], losses: list[float], memory_gb: float, world: int
) -> TrialResult:
    median = statistics.median(step_times)
    p90 = sorted(step_times)[min(len(step_times) - 1, int(0.9 * len(step_times)))]
    m = config.model
    # Whole sequences of the global batch: context parallelism splits each over cp ranks, who
    # are in `world` (tp x pp x cp x dp), so a rank's share of the FLOPs stays flops / world.
    tokens = config.global_batch_size * m.seq_len
    flops = model_flops_per_iteration(m, tokens)
    tflops = flops / median / world / 1e12
    return TrialResult(
        status="ok",
        tokens_per_s=tokens / median,
        tokens_per_s_per_gpu=tokens / median / world,
        tflops_per_gpu=tflops,
        mfu=tflops / config.peak_tflops if config.peak_tflops else None,
        step_time_s=median,
        step_time_p90_s=p90,
        peak_memory_gb=memory_gb,
        loss_first=losses[0],
        loss_last=losses[-1],
        world_size=world,
        step_times_s=step_times,
        extra={"losses": losses},
    )


def write_result(path: str | None, result: TrialResult, *, exclusive: bool = False) -> None:
    """Write atomically; with `exclusive`, the first failing rank's report wins."""
    if not path:
        print(f"PARATUNE_RESULT {result.to_json()}", flush=True)
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_text(result.to_json())
    if exclusive:
        try:
            os.link(tmp, target)
        except FileExistsError:
            pass
        tmp.unlink()
    else:
        os.replace(tmp, target)


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        plan = check_feasible(config, world)
    except Infeasible as exc:
        if int(os.environ.get("RANK", "0")) == 0:
            write_result(config.result_file, TrialResult(status="infeasible", error=str(exc)))
        return 0
    device = pick_device()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend)
    try:
        result = train(config, plan, device)
        if dist.get_rank() == 0:
            write_result(config.result_file, result)
        dist.barrier()
        leave(0)
    except torch.OutOfMemoryError as exc:
        failure = TrialResult(status="oom", error=f"OutOfMemoryError: {exc}"[:2000])
    except Exception as exc:  # any other failure is data, reported with its reason
        traceback.print_exc()
        failure = TrialResult(status="failed", error=f"{type(exc).__name__}: {exc}"[:2000])
    failure.world_size = world
    write_result(config.result_file, failure, exclusive=True)
    leave(1, destroy_group=False)


if __name__ == "__main__":
    sys.exit(main())
