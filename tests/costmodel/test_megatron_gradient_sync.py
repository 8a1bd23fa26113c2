"""Megatron-Core's gradient handling, as its source runs it (megatron-core's
distributed/distributed_data_parallel.py, distributed/param_and_grad_buffer.py,
pipeline_parallel/schedules.py): the distributed optimizer reduce-scatters its gradients, the
buckets grow with the data-parallel size, and an interleaved pipeline reduces each model
chunk's gradients once that chunk's backward is done."""

from __future__ import annotations

import itertools

import pytest
from conftest import ROOT

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.data_parallel import exposed_per_model_chunk
from orchestrator.costmodel.zero_engine import DEEPSPEED, PYTORCH
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.space import Layout
from orchestrator.trainers.megatron.runtime import MEGATRON_OVERLAP_FLAG, megatron_lm_runtime

H100 = CLUSTER_PRESETS["h100-80g"]
GPT_175B = MODEL_PRESETS["gpt-175b"]
OVERLAPPED = megatron_lm_runtime([MEGATRON_OVERLAP_FLAG])


def queued_reduction(reduction_s: float, hidden_s: float, chunks: int, gap: int) -> float:
    """The same exposure by walking the queue: chunk j's buckets start `hidden/v` before its
    last backward ends, j rounds of `gap` chunk-backwards before the stage's end; one stream
    reduces them in the order they are ready."""
    per_chunk, own = reduction_s / chunks, hidden_s / chunks
    stream_free, end = float("-inf"), 0.0
    for j in reversed(range(chunks)):  # chunk v-1 is done first, chunk 0 last
        ready = end - j * gap * own - own
        stream_free = max(stream_free, ready) + per_chunk
    return max(0.0, stream_free - end)


@pytest.mark.parametrize("reduction_s,hidden_s,chunks,gap", [
    (r, h, v, p) for r, h, v, p in itertools.product(
        (0.05, 0.38, 2.0), (0.05, 0.3), (1, 2, 6, 12), (1, 4, 8))])
def test_the_closed_form_is_the_queue_of_chunk_reductions(reduction_s, hidden_s, chunks, gap):
    assert exposed_per_model_chunk(reduction_s, hidden_s, chunks, gap) == \
        pytest.approx(queued_reduction(reduction_s, hidden_s, chunks, gap), abs=1e-12)


def test_one_chunk_is_the_reduction_behind_the_last_micro_batch():
    assert exposed_per_model_chunk(0.5, 0.2, 1, 8) == pytest.approx(0.3)
    assert exposed_per_model_chunk(0.1, 0.2, 1, 8) == 0.0
    # 12 chunks of 0.04 s, each with 8 chunk-backwards of 0.02 s after it: one chunk's
    # reduction is left, less its own hidden share.
    assert exposed_per_model_chunk(0.48, 0.24, 12, 8) == pytest.approx(0.02)


def test_buckets_hold_40_million_parameters_or_a_million_per_data_parallel_rank():
    # distributed_data_parallel.py: bucket_size = max(40000000, 1000000 * dp_group.size())
    assert OVERLAPPED.gradient_bucket_bytes(25e6, 16, 2) == 2 * 40_000_000
    assert OVERLAPPED.gradient_bucket_bytes(25e6, 320, 4) == 4 * 320_000_000
    assert DEEPSPEED.gradient_bucket_bytes(25e6, 320, 2) == 25e6


def _time(runtime, **fields):
    layout = Layout(tp=8, pp=8, dp=16, zero_stage=1, micro_batch_size=1, grad_accum_steps=16,
                    sequence_parallel=True, **fields)
    return CostModel(GPT_175B, H100, 8, runtime=runtime).estimate(layout).time


def test_the_distributed_optimizer_reduce_scatters_where_deepspeeds_stage_1_all_reduces():
    megatron, deepspeed = _time(OVERLAPPED).dp_comm, _time(DEEPSPEED).dp_comm
    fabric = Fabric.of(H100, 8, CostModel(GPT_175B, H100, 8).coefficients.bandwidth_efficiency)
    # A reduce-scatter moves half an all-reduce's bytes; both runs gather the same weights.
    assert megatron.t_os0 < 0.6 * deepspeed.t_os0
    assert megatron.t_os1 == pytest.approx(deepspeed.t_os1)
    assert fabric.bucketed_reduce_scatter(1e9, 1e8, 16) < 0.6 * fabric.bucketed_all_reduce(
        1e9, 1e8, 16)


def test_overlap_grad_reduce_hides_the_reduce_scatter_and_interleaving_hides_more():
    plain = _time(megatron_lm_runtime())
    behind_last = _time(OVERLAPPED)
    interleaved = _time(OVERLAPPED, pp_schedule="interleaved", virtual_stages=4)
    # Without --overlap-grad-reduce, Megatron reduces after the backward: all of it waits.
    assert plain.dp_exposed_s == pytest.approx(plain.dp_comm.t_os0 + plain.dp_comm.t_os1)
    assert behind_last.dp_exposed_s < plain.dp_exposed_s
    assert interleaved.dp_exposed_s < behind_last.dp_exposed_s


def test_deepspeed_and_the_built_in_trainer_reduce_no_chunk_early():
    for runtime in (DEEPSPEED, PYTORCH):
        flat = _time(runtime)
        interleaved = _time(runtime, pp_schedule="interleaved", virtual_stages=4)
        assert interleaved.dp_exposed_s == pytest.approx(flat.dp_exposed_s)


def test_mlperf_gpt3_at_ten_thousand_gpus_is_priced_within_ten_percent():
    """NVIDIA's MLPerf Training v3.1 GPT-3 175B runs on up to 10,752 H100 with ZeRO-1, TP 4,
    PP 8, 12 virtual stages and 8 micro-batches a step: the data-parallel reduction over 336
    replicas is most of what a step adds over its compute. Measured rows, priced as the
    validation report prices them (benchmarks/measured/mlperf_training_llm.csv)."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import measured_corpus

    from orchestrator.costmodel.published_rows import PricedRow, price_row

    rows = [r for r in measured_corpus.rows() if r.file == "mlperf_training_llm.csv"
            and r.values.get("gpus") in ("10240", "10752")]
    priced_rows = [p for p in map(price_row, (r.values for r in rows))
                   if isinstance(p, PricedRow)]  # the others publish a time to train only
    assert len(priced_rows) == 9
    for priced in priced_rows:
        estimate = priced.cost.estimate(priced.config)
        assert estimate.fits
        assert estimate.step_time_s / priced.measured_step_s == pytest.approx(1, abs=0.10)
