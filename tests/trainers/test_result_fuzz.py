"""Hostile trial output, generated: whatever a trial leaves as its result file and its log (any
JSON, any bytes, nesting, huge numbers, special files), reading it gives a result the journal
can keep, at once and in bounded memory; a few such trials under real controllers end as data,
with earlier trials' records kept and `status` answering."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import tempfile
from pathlib import Path

from controller_harness import (
    GOOD,
    PEAK_MEMORY_MB,
    TRACEBACK,
    command_spec,
    controller,
    finished,
    trial_program,
)
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.result import METRIC_FIELDS, STATUSES, STDOUT_MARKER, TrialResult
from orchestrator.trainers import (
    BuiltinTrainer,
    CommandTrainer,
    DeepSpeedTrainer,
    Measure,
    MegatronDeepSpeedTrainer,
    MegatronLMTrainer,
    TorchtitanTrainer,
)
from orchestrator.trainers.result_reading import read_trial_result
from orchestrator.trial.folder import TrialFolder

READ_LIMIT_S = 10  # one read of a trial's files; far above what a bounded read takes
FIELDS = [f.name for f in dataclasses.fields(TrialResult)]

leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                   st.sampled_from(STATUSES))
json_values = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=5), max_leaves=25)
result_objects = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), json_values,
                                 max_size=8)
json_texts = st.one_of(
    (json_values | result_objects).map(json.dumps),
    st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 6000).map(lambda n: '{"tokens_per_s": ' + "9" * n + "}"),
    st.text(max_size=200),
)
# Each trainer's metric lines, with a number in them as a trial might print anything there.
METRIC_LINES = (
    "{n} iteration {n}/ 10 | elapsed time per iteration (ms): {n} | lm loss: {n} |",
    "[Rank 0] memory (MB) | allocated: {n} | max allocated: {n} |",
    "global_step={n}, RunningAvgSamplesPerSec={n}, CurrSamplesPerSec={n}, MemAllocated={n}GB, "
    "MaxMemAllocated={n}GB",
    "step: {n} loss: {n} grad_norm: 1 memory: {n}GiB(1%) tps: {n} tflops: {n} mfu: {n}%",
    "{n} loss: {n}",
)
numbers = st.from_regex(r"\A[-\d.eE+inf,]{1,30}\Z") | st.integers(1, 6000).map(lambda n: "9" * n)
metric_lines = st.tuples(st.sampled_from(METRIC_LINES), numbers).map(
    lambda pair: pair[0].replace("{n}", pair[1]))
contents = st.one_of(json_texts.map(str.encode), st.binary(max_size=500),
                     st.lists(metric_lines, max_size=5).map(lambda ls: "\n".join(ls).encode()))
ADAPTERS = (BuiltinTrainer(), CommandTrainer({"step_time_s": r"loss: ([\d.]+)"}),
            DeepSpeedTrainer(), MegatronLMTrainer(), MegatronDeepSpeedTrainer(),
            TorchtitanTrainer())
# What sits at a file's name, where not plain contents: made by `place` below.
SPECIAL = ("absent", "folder", "fifo", "dev_zero", "dangling", "link_to_good", "sparse_gib")
placings = st.one_of(st.sampled_from(SPECIAL), contents)
logs = st.one_of(st.sampled_from(SPECIAL), contents, json_texts.map(
    lambda text: f"step 1\n{STDOUT_MARKER} {text}\nlast words\n".encode()))


def place(path: Path, what: str | bytes) -> None:
    """Leave `what` at `path`: bytes as a file, else one of SPECIAL."""
    if isinstance(what, bytes):
        path.write_bytes(what)
    elif what == "folder":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "dev_zero":
        path.symlink_to("/dev/zero")
    elif what == "dangling":
        path.symlink_to(path.parent / "nowhere" / "x")
    elif what == "link_to_good":
        (path.parent / "good").write_text(GOOD)
        path.symlink_to(path.parent / "good")
    elif what == "sparse_gib":
        with open(path, "wb") as f:
            f.truncate(1 << 30)  # a gigabyte of NULs taking no disk: read whole, a gigabyte


class _TooSlow(Exception):
    pass


def _alarm(signum, frame):  # noqa: ANN001 - signal handler signature
    raise _TooSlow(f"reading a trial's files took over {READ_LIMIT_S} s")


MEASURE = Measure(world_size=2, seq_len=64, tokens_per_step=512, model_flops_per_step=1e9,
                  peak_tflops=1.0, warmup_steps=0)


def read_within_limit(folder: TrialFolder, returncode: int | None, adapter) -> TrialResult:
    """read_trial_result, failed by SIGALRM where it takes over READ_LIMIT_S."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(READ_LIMIT_S)
    try:
        return read_trial_result(folder, returncode, adapter, MEASURE)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(result=placings, log=logs, returncode=st.sampled_from([0, 1, None]),
       adapter=st.sampled_from(ADAPTERS))
def test_any_trial_output_reads_as_a_result_the_journal_keeps(result, log, returncode, adapter):
    with tempfile.TemporaryDirectory() as tmp:
        folder = TrialFolder(Path(tmp) / "t0001")
        folder.path.mkdir()
        place(folder.result_file, result)
        place(folder.log_file, log)
        read = read_within_limit(folder, returncode, adapter)
    assert isinstance(read, TrialResult) and read.status in STATUSES
    assert TrialResult.from_dict(json.loads(read.to_json())).status == read.status
    for name in METRIC_FIELDS:
        read.metric(name)  # the objective and the tables read these: no exception
    if read.error and read.error.startswith("unreadable"):
        assert "\n" not in read.error and len(read.error) < 1000, read.error
    if result in ("folder", "fifo", "dev_zero", "dangling", "link_to_good", "sparse_gib"):
        assert read.status == "failed" and read.error.startswith("unreadable result.json")


@pytest.mark.parametrize("adapter, line", [
    (MegatronLMTrainer(), f" iteration {'9' * 5000}/ 10 | elapsed time per iteration (ms): 1 |"),
    (DeepSpeedTrainer(), "global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=1.2.3, "
                         "MemAllocated=1GB, MaxMemAllocated=1GB"),
    (TorchtitanTrainer(), "step: 1 loss: 1 grad_norm: 1 memory: 1.2.3GiB(1%) tps: 1 tflops: 1 "
                          "mfu: 1%"),
    (MegatronLMTrainer(), "memory (MB) | " * 250_000),  # each start scanned to the line's end
], ids=["megatron-iteration-of-5000-digits", "deepspeed-1.2.3", "torchtitan-1.2.3",
        "megatron-memory-line-of-3-mb"])
def test_a_metric_line_no_number_reads_fails_the_trial_not_the_reader(tmp_path, adapter, line):
    folder = TrialFolder(tmp_path / "t0001")
    folder.path.mkdir()
    folder.log_file.write_text(f"starting\n{line}\nthe end\n")
    read = read_within_limit(folder, 0, adapter)
    assert read.status == "failed" and "the end" in read.error


# What the second trial of a real campaign leaves, by the kind Hypothesis draws.
LEFT_BY_TRIAL = {
    "folder": "os.mkdir(result)",
    "fifo": "os.mkfifo(result)",
    "dev_zero": "os.symlink('/dev/zero', result)",
    "dangling": "os.symlink('/nowhere/x', result)",
    "log_fifo": "os.unlink(log); os.mkfifo(log)",
    "log_of_400_mb": "os.ftruncate(1, 400 << 20)",
}


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(left=st.sampled_from(sorted(LEFT_BY_TRIAL)) | contents)
def test_a_hostile_trial_under_a_real_controller_ends_as_data(tmp_path_factory, left):
    tmp = tmp_path_factory.mktemp("fuzz")
    payload = tmp / "payload"
    if isinstance(left, bytes):
        payload.write_bytes(left)
        code = f"import shutil; shutil.copyfile({str(payload)!r}, result)"
    else:
        code = LEFT_BY_TRIAL[left]
    program = trial_program({"t0001": f"open(result, 'w').write({GOOD!r})", "t0002": code})
    spec = command_spec(tmp / "fuzz.yaml", "fuzz", program, 2)
    runs = tmp / "runs"
    exit_code, err, peak = controller(runs, "run", str(spec))
    assert exit_code == 0 and not TRACEBACK.search(err), err[-3000:]
    assert peak < PEAK_MEMORY_MB
    results = finished(runs / "fuzz")
    assert results["t0001"]["status"] == "ok" and "t0002" in results
    exit_code, err, _ = controller(runs, "status", "fuzz")
    assert exit_code == 0, err
