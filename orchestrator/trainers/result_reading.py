"""A trial's result from what it left in its folder: its own report if it wrote one (the
built-in job does), a `PARATUNE_RESULT {json}` line in its log, else its log read by its
trainer's adapter, with out-of-memory messages mapped to `oom`.

What a trial leaves may be anything (a FIFO, a link to /dev/zero, gigabytes, JSON nested a
million deep): it is read bounded, and whatever cannot be read is the trial's failure, in one
line, never the controller's."""

from __future__ import annotations

import statistics

from orchestrator.common.bounded_files import UnreadableFile, read_bounded, read_tail
from orchestrator.common.bounded_json import NotJson, UnfitJson, loads_bounded
from orchestrator.common.errors import excerpt
from orchestrator.result import STDOUT_MARKER, TrialResult
from orchestrator.trainers.base import LogMetrics, Measure, TrainerAdapter
from orchestrator.trial.folder import LOG_FILE, RESULT_FILE, TrialFolder

RESULT_MAX_BYTES = 1 << 20  # a result is a few hundred bytes; its step times a few KB more
LOG_TAIL_BYTES = 4 << 20  # what of a log is read: its step lines and its last words are there
MAX_DEPTH = 32  # nesting of a result's JSON: its `extra` may hold a mapping or two
METRIC_LINE_CHARS = 2000  # a metric line is a few hundred: what is longer is read that far


class _BadResult(ValueError):
    """A result that parses but is not one: its text is the reason."""


def parse_result(text: str) -> TrialResult:
    """A trial's result from its JSON text; _BadResult, with the reason, when it is none."""
    try:
        data = loads_bounded(text, MAX_DEPTH)
    except (UnfitJson, NotJson) as exc:
        raise _BadResult(str(exc)) from None
    if not isinstance(data, dict):
        raise _BadResult(f"a JSON {type(data).__name__}, not an object of result fields")
    try:
        return TrialResult.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise _BadResult(excerpt(str(exc), 300, quote=False)) from None


def _reported(folder: TrialFolder) -> TrialResult:
    """The result file the trial wrote, or its failure to write a readable one."""
    try:
        raw = read_bounded(folder.result_file, RESULT_MAX_BYTES)
        return parse_result(raw.decode("utf-8"))
    except UnreadableFile as exc:
        why = str(exc)
    except UnicodeDecodeError:
        why = "not UTF-8 text"
    except _BadResult as exc:
        why = str(exc)
    return TrialResult(status="failed", error=f"unreadable {RESULT_FILE}: {why}")


def read_log(folder: TrialFolder) -> tuple[str, str | None]:
    """The last LOG_TAIL_BYTES of the trial's log ("" where there is none), and why it could
    not be read where it could not."""
    try:
        return read_tail(folder.log_file, LOG_TAIL_BYTES).decode(errors="replace"), None
    except UnreadableFile as exc:
        return "", None if exc.missing else str(exc)


def read_trial_result(folder: TrialFolder, returncode: int | None, adapter: TrainerAdapter,
                      measure: Measure) -> TrialResult:
    if (linked := folder.followed_link()) is not None:
        return TrialResult(status="failed", error=f"{linked} is a symbolic link; a trial's "
                           "files are never read elsewhere")
    if folder.left_result():  # trusted even on a non-zero exit: torch can abort at teardown
        return _reported(folder)
    log, unreadable = read_log(folder)
    if unreadable:
        return TrialResult(status="failed", world_size=measure.world_size,
                           error=f"unreadable {LOG_FILE}: {unreadable}")
    for line in reversed(log.splitlines()):
        if line.startswith(STDOUT_MARKER + " "):
            try:
                return parse_result(line[len(STDOUT_MARKER) + 1:])
            except _BadResult:
                break
    return result_from_log(adapter, log, returncode, measure)


def result_from_log(adapter: TrainerAdapter, log: str, returncode: int | None,
                    measure: Measure) -> TrialResult:
    """The result a trainer's log shows: `oom` on an out-of-memory message, `ok` when it exited
    cleanly after logging steps, else `failed` with the log's last lines."""
    try:
        return _judged(adapter, log, returncode, measure)
    except Exception as exc:  # noqa: BLE001 - the log is the trial's text: what trips a parser fails the trial
        return TrialResult(status="failed", world_size=measure.world_size, error=(
            f"{adapter.name}: its log holds a line its parser cannot read "
            f"({type(exc).__name__}: {excerpt(str(exc), 200, quote=False)}): {log_tail(log)}"))


def _judged(adapter: TrainerAdapter, log: str, returncode: int | None,
            measure: Measure) -> TrialResult:
    world = measure.world_size
    oom = adapter.out_of_memory(log)
    if oom:
        return TrialResult(status="oom", world_size=world, error=oom)
    metrics = adapter.parse_log("\n".join(line[:METRIC_LINE_CHARS] for line in log.splitlines()))
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
