"""Reading Megatron-Bridge's training log: its iteration line is Megatron-LM's, its memory line
is its own.

megatron-bridge 0.6.2, megatron/bridge/training/utils/train_utils.py, `training_log`:

    log_string = f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}]"
    log_string += " iteration {:8d}/{:8d} |".format(iteration, train_config.train_iters)
    log_string += " consumed samples: {:12d} |".format(...)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(elapsed_time_per_iteration * 1000.0)
    log_string += f" throughput per GPU (TFLOP/s/GPU): {per_gpu_tf:.1f} |"   # with logger.log_throughput
    log_string += f" learning rate: {learning_rate:.6E} |"
    log_string += f" global batch size: {batch_size:5d} |"
    log_string += " {}: {:.6E} |".format(key, avg)                        # "lm loss" (training/losses.py)
    ...

the fields megatron_log.py reads for Megatron-LM, so that parser reads it (imported, not
copied). The memory report after the first iterations is, in the same function,

    memory_string = f"(after {iteration} iterations) memory (GB)"
    for metric, value in report_memory(logger_config.memory_keys).items():
        memory_string += f" | {metric}: {value}"
    print("[Rank {}] {}".format(torch.distributed.get_rank(), memory_string), flush=True)

where `report_memory` names torch's "allocated_bytes.all.peak" "mem-max-allocated-gigabytes"
(MEMORY_KEYS with "bytes" replaced) and divides bytes by 1.0e9, ParaTune's GB.
"""

from __future__ import annotations

import re

from orchestrator.trainers.base import LogMetrics
from orchestrator.trainers.megatron.log import MEMORY, parse_megatron_log

# Searched after MEMORY from its end, as megatron_log.py does, so a long line stays linear.
MAX_ALLOCATED_GB = re.compile(
    r"\|\s*mem-max-allocated-gigabytes:\s*(?P<max>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def parse_bridge_log(text: str) -> LogMetrics:
    """Per logged iteration: step time, loss and TFLOP/s per GPU; the peak allocated memory."""
    metrics = parse_megatron_log(text, read_tflops=True)
    for line in text.splitlines():
        memory = MEMORY.search(line)
        peak = memory and MAX_ALLOCATED_GB.search(line, memory.end())
        if peak:
            metrics.peak_memory_gb = max(metrics.peak_memory_gb or 0.0, float(peak["max"]))
    return metrics
