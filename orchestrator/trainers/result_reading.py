"""A trial's result from what it left in its folder: its own report if it wrote one (the
built-in job does), a `PARATUNE_RESULT {json}` line in its log, else its log read by its
trainer's adapter, with out-of-memory messages mapped to `oom`."""

from __future__ import annotations

import json
import statistics

from orchestrator.result import STDOUT_MARKER, TrialResult
from orchestrator.trainers.base import LogMetrics, Measure, TrainerAdapter
from orchestrator.trial.folder import RESULT_FILE, TrialFolder


def read_trial_result(folder: TrialFolder, returncode: int | None, adapter: TrainerAdapter,
                      measure: Measure) -> TrialResult:
    if folder.result_file.exists():  # trusted even on a non-zero exit: torch can abort at teardown
        try:
            return TrialResult.from_dict(json.loads(folder.result_file.read_text()))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            return TrialResult(status="failed", error=f"unreadable {RESULT_FILE}: {exc}")
    log = folder.log_file.read_text(errors="replace") if folder.log_file.exists() else ""
    for line in reversed(log.splitlines()):
        if line.startswith(STDOUT_MARKER + " "):
            try:
                return TrialResult.from_dict(json.loads(line[len(STDOUT_MARKER) + 1:]))
            except (json.JSONDecodeError, TypeError, ValueError):
                break
    return result_from_log(adapter, log, returncode, measure)


def result_from_log(adapter: TrainerAdapter, log: str, returncode: int | None,
                    measure: Measure) -> TrialResult:
    """The result a trainer's log shows: `oom` on an out-of-memory message, `ok` when it exited
    cleanly after logging steps, else `failed` with the log's last lines."""
    world = measure.world_size
    oom = adapter.out_of_memory(log)
    if oom:
        return TrialResult(status="oom", world_size=world, error=oom)
    metrics = adapter.parse_log(log)
    if metrics.steps == 0 or returncode not in (0, None):
        reason = metrics.error or (f"exit code {returncode}, " if returncode else "")
        what = "no step metrics in its log" if metrics.steps == 0 else \
            f"{metrics.steps} steps logged before it ended"
        return TrialResult(status="failed", world_size=world,
                           error=f"{adapter.name}: {reason}{what}: {log_tail(log)}")
    return _measured(metrics, measure)


def _after_warmup(values: list[float], warmup: int) -> list[float]:
    return values[warmup:] if len(values) > warmup else values


def _median(values: list[float], warmup: int) -> float | None:
    """The median of the per-step values after warm-up, as the step time's: one slow step
    (a checkpoint, a hiccup) does not move it."""
    kept = _after_warmup(values, warmup)
    return statistics.median(kept) if kept else None


def _measured(m: LogMetrics, measure: Measure) -> TrialResult:
    """Fill what the log left out from what it gave: step time <-> tokens/s through the tokens
    per step, TFLOP/s from the model FLOPs, MFU from the device peak."""
    warmup, world = measure.warmup_steps, measure.world_size
    times = _after_warmup(m.step_times_s, warmup)
    step_time = statistics.median(times) if times else None
    tokens_per_s = _median(m.tokens_per_s, warmup)
    samples = _median(m.samples_per_s, warmup)
    if tokens_per_s is None and samples is not None:
        tokens_per_s = samples * measure.seq_len
    per_gpu = _median(m.tokens_per_s_per_gpu, warmup)
    if tokens_per_s is None and per_gpu is not None:
        tokens_per_s = per_gpu * world
    if step_time is None and tokens_per_s:
        step_time = measure.tokens_per_step / tokens_per_s
    if tokens_per_s is None and step_time:
        tokens_per_s = measure.tokens_per_step / step_time
    tflops = _median(m.tflops_per_gpu, warmup)
    if tflops is None and step_time:
        tflops = measure.model_flops_per_step / step_time / world / 1e12
    mfu = _median(m.mfu, warmup)
    if mfu is None and tflops is not None and measure.peak_tflops:
        mfu = tflops / measure.peak_tflops
    return TrialResult(
        status="ok", tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / world if tokens_per_s else None,
        tflops_per_gpu=tflops, mfu=mfu, step_time_s=step_time,
        step_time_p90_s=sorted(times)[int(0.9 * (len(times) - 1))] if times else None,
        peak_memory_gb=m.peak_memory_gb, loss_first=m.losses[0] if m.losses else None,
        loss_last=m.losses[-1] if m.losses else None, world_size=world, step_times_s=times,
    )


def log_tail(log: str, lines: int = 6) -> str:
    tail = [line.strip() for line in log.splitlines() if line.strip()][-lines:]
    return " | ".join(tail)[-1500:] or "(empty log)"
