"""Reading Megatron-LM's and Megatron-DeepSpeed's training logs: the `training_log` line printed
every `--log-interval` iterations, the memory report after the first ones, and the last Python
exception of a crash.

Megatron-LM (megatron/training/training.py), with --log-throughput:

     [2026-11-30 10:00:00.123456] iteration       10/     100 | consumed samples: 320 |
     elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 |
     learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 1.000000E+01 |
     loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 |
     number of nan iterations:   0 |

Megatron-DeepSpeed (megatron/training.py) prints no date, adds `consumed tokens` and `actual
seqlen`, and ends with `samples per second: 4.457 | tokens per gpu per second (tgs): 142.612 |
TFLOPs: 153.38 |` (then a second line ` TeraFLOPs: ... | params(B): ...`). Its TFLOPs count the
recomputed forward pass (factor 4 instead of 3 under checkpointing): they are hardware FLOPs,
not the model FLOPs ParaTune's MFU uses, so they are not read; TFLOP/s come from the step time.

Both print `[Rank 0] (after 1 iterations) memory (MB) | allocated: ... | max allocated: ... |`
(newer Megatron-LM releases in GB). Each line is one line of the log; all ranks may repeat it.
"""

from __future__ import annotations

import re

from orchestrator.trainers.base import LogMetrics

ITERATION = re.compile(r"\biteration\s+(?P<it>\d+)\s*/\s*\d+\s*\|(?P<fields>.*)$")
MEMORY = re.compile(r"memory \((?P<unit>MB|GB)\)")
# Searched after MEMORY, not in one pattern with it: that one scans to the line's end from each
# "memory (MB)", so a line of many takes quadratic time.
MAX_ALLOCATED = re.compile(r"\|\s*max allocated:\s*(?P<max>[\d.]+)")
EXCEPTION = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s*)?"  # torchrun's rank prefix
                       r"(?P<error>(?:[\w.]+\.)?\w*(?:Error|Exception)(?::.*)?)$")

ELAPSED_MS = "elapsed time per iteration (ms)"
TFLOPS = "throughput per GPU (TFLOP/s/GPU)"  # Megatron-LM, model FLOPs
SAMPLES = "samples per second"  # Megatron-DeepSpeed
TOKENS_PER_GPU = "tokens per gpu per second (tgs)"  # Megatron-DeepSpeed
LOSS = "lm loss"


def fields(text: str) -> dict[str, float]:
    """`key: number |` pairs of one iteration line (non-numbers are skipped)."""
    found: dict[str, float] = {}
    for part in text.split("|"):
        key, sep, value = part.rpartition(":")
        if not sep:
            continue
        try:
            found[key.strip()] = float(value.strip())
        except ValueError:
            continue
    return found


def parse_megatron_log(text: str, read_tflops: bool) -> LogMetrics:
    """Per logged iteration: step time, loss, and the throughput each tool prints (Megatron-LM's
    TFLOP/s per GPU when `read_tflops`; Megatron-DeepSpeed's samples/s and tokens/s per GPU)."""
    metrics = LogMetrics()
    seen: set[int] = set()
    for raw in text.splitlines():
        line = raw.strip()
        match = ITERATION.search(line)
        if match:
            iteration = int(match["it"])
            values = fields(match["fields"])
            if iteration in seen or ELAPSED_MS not in values:
                continue  # a rank's repeat, or a validation line
            seen.add(iteration)
            metrics.step_times_s.append(values[ELAPSED_MS] / 1000.0)
            if LOSS in values:
                metrics.losses.append(values[LOSS])
            if read_tflops and TFLOPS in values:
                metrics.tflops_per_gpu.append(values[TFLOPS])
            if SAMPLES in values:
                metrics.samples_per_s.append(values[SAMPLES])
            if TOKENS_PER_GPU in values:
                metrics.tokens_per_s_per_gpu.append(values[TOKENS_PER_GPU])
            continue
        memory = MEMORY.search(line)
        peak = memory and MAX_ALLOCATED.search(line, memory.end())
        if peak:
            gb = float(peak["max"]) / (1024.0 if memory["unit"] == "MB" else 1.0)
            metrics.peak_memory_gb = max(metrics.peak_memory_gb or 0.0, gb)
            continue
        error = EXCEPTION.match(line)
        if error and "ChildFailedError" not in line:  # torchrun's summary, not the cause
            metrics.error = error["error"][:300] + "; "
    return metrics
