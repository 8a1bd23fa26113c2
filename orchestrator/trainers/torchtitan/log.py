"""torchtitan 0.3.0's metrics log read back.

Log (torchtitan/components/metrics.py, MetricsProcessor.log; ANSI colours unless
metrics.disable_color_printing; every rank logs its own line):

    step:  2  loss:  7.95473  grad_norm:  1.2345  memory:  1.23GiB(3.10%)  tps: 12,345
    tflops: 12.34  mfu: 1.25%

`tps` is tokens per second per device (tokens of the rank's data-parallel replica / time /
(tp x pp x cp)); `memory` is the peak reserved GiB of the rank's device, turned here into GB of
1e9 bytes like every `peak_memory_gb` (jobs/ reports max_memory_allocated / 1e9). torchtitan's
tflops and mfu follow its own FLOPs count (6N plus attention) and device peak table.
"""

from __future__ import annotations

import re

from orchestrator.trainers.base import LogMetrics

GIB_IN_GB = 2**30 / 1e9

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(
    r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>\S+)\s+grad_norm:\s*\S+\s+"
    r"memory:\s*(?P<mem>[\d.]+)GiB\([\d.]+%\)\s+tps:\s*(?P<tps>[\d,]+)\s+"
    r"tflops:\s*(?P<tflops>[\d,.]+)\s+mfu:\s*(?:(?P<mfu>[\d.]+)%|N/A)")
EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b.*?:\s")


def parse_torchtitan_log(text: str) -> LogMetrics:
    """Each step's figures, averaged over the ranks' lines; the first exception line is the
    error."""
    metrics = LogMetrics()
    steps: dict[int, list[re.Match]] = {}
    for raw in text.splitlines():
        line = ANSI.sub("", raw)
        match = STEP.search(line)
        if match:
            steps.setdefault(int(match["step"]), []).append(match)
        elif metrics.error is None and EXCEPTION.match(line):  # the first: the cause
            metrics.error = line.strip()[:500]
    for step in sorted(steps):
        ranks = steps[step]  # one line per rank
        metrics.tokens_per_s_per_gpu.append(
            sum(float(m["tps"].replace(",", "")) for m in ranks) / len(ranks))
        metrics.tflops_per_gpu.append(
            sum(float(m["tflops"].replace(",", "")) for m in ranks) / len(ranks))
        mfu = [float(m["mfu"]) / 100 for m in ranks if m["mfu"]]
        if mfu:
            metrics.mfu.append(sum(mfu) / len(mfu))
        losses = [float(m["loss"]) for m in ranks if _number(m["loss"]) >= 0]
        if losses:  # pipeline stages without the loss log -1
            metrics.losses.append(losses[0])
        peak = max(float(m["mem"]) for m in ranks) * GIB_IN_GB
        metrics.peak_memory_gb = max(metrics.peak_memory_gb or 0.0, peak)
    return metrics


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return -1.0
