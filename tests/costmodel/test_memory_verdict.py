"""The three-way memory verdict: a layout predicted over capacity but within the memory model's
margin is `risky`, listed by `plan` and measured by a campaign (its OOM recorded); only one
beyond the margin is pruned, with the margin in its reason."""

from __future__ import annotations

import json
import sys

from functools import partial

import pytest
import yaml
from builders import layout
from conftest import ROOT, journal_events

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.fit_verdict import MEMORY_MARGIN
from orchestrator.costmodel.memory import GB
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.scheduling.live_cost_model import LiveCostModel
from orchestrator.space import Layout

# llama-7b on one node of 8 devices, ZeRO-3, global batch 128: memory grows with the micro-batch.
FITS, RISKY, BEYOND = 2, 8, 16  # micro-batch sizes

node_layout = partial(layout, tp=1, dp=8, zero_stage=3, batch=128)


def used_gb(micro_batch: int) -> float:
    memory = CostModel(MODEL_PRESETS["llama-7b"], CLUSTER_PRESETS["a100-80g"], 8).memory(
        node_layout(micro_batch_size=micro_batch))
    return (memory.total - memory.reserve) / GB


def capacity_gb() -> float:
    """A device on which the RISKY layout's predicted memory (used + the reserve, 8% of the
    device) is half the margin over capacity: used + 0.08·C = C·(1 + margin/2)."""
    return used_gb(RISKY) / (1 - 0.08 + MEMORY_MARGIN / 2)


@pytest.fixture(scope="module")
def cost() -> CostModel:
    cluster = CLUSTER_PRESETS["a100-80g"].model_copy(update={"memory_gb": capacity_gb()})
    return CostModel(MODEL_PRESETS["llama-7b"], cluster, 8)


def test_verdicts_around_capacity(cost):
    capacity = cost.cluster.memory_gb
    fitting, risky, beyond = (cost.estimate(node_layout(micro_batch_size=m)) for m in (FITS, RISKY, BEYOND))
    assert fitting.memory_gb <= capacity < risky.memory_gb <= capacity * (1 + MEMORY_MARGIN)
    assert beyond.memory_gb > capacity * (1 + MEMORY_MARGIN)
    assert (fitting.memory_verdict, fitting.fits, fitting.prunable) == ("fits", True, False)
    assert (risky.memory_verdict, risky.fits, risky.prunable) == ("risky", False, False)
    assert (beyond.memory_verdict, beyond.fits, beyond.prunable) == ("does_not_fit", False, True)


def test_the_live_model_measures_a_risky_layout_and_prunes_one_beyond_the_margin(cost):
    live = LiveCostModel(cost, [])
    assert live.infeasible(node_layout(micro_batch_size=RISKY)) is None
    pruned = live.infeasible(node_layout(micro_batch_size=BEYOND))
    assert pruned is not None and pruned.status == "infeasible"
    assert f"memory model's {MEMORY_MARGIN:.0%} margin" in pruned.error
    assert f"{cost.cluster.memory_gb * (1 + MEMORY_MARGIN):.2f} GB" in pruned.error


def spec_text(tmp_path, **extra) -> str:
    data = {
        "name": "edge", "model": "llama-7b",
        "cluster": {"preset": "a100-80g", "memory_gb": capacity_gb()},
        "scale": {"nodes": 1, "gpus_per_node": 8, "global_batch_size": 128},
        "space": {"tp": [1], "pp": [1], "zero_stage": [3],
                  "micro_batch_size": [FITS, RISKY, BEYOND], "activation_checkpointing": ["none"]},
        "tracking": {"enabled": False}, **extra,
    }
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def micro_batches(entries: list[dict]) -> list[int]:
    return [e["config"]["micro_batch_size"] for e in entries]


def test_plan_lists_a_risky_layout_apart_with_the_margin(cli, tmp_path):
    spec = spec_text(tmp_path)
    code, out, err = cli("plan", spec, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert micro_batches(data["top"]) == [FITS] and data["feasible"] == 1
    assert micro_batches(data["risky"]) == [RISKY] and data["risky_count"] == 1
    assert data["risky"][0]["memory_verdict"] == "risky"
    assert data["memory_margin"] == MEMORY_MARGIN
    code, out, err = cli("plan", spec)
    assert code == 0, err
    text = " ".join(out.split())
    assert f"1 risky: predicted over {capacity_gb():g} GB, within the memory model's " \
           f"{MEMORY_MARGIN:.0%} margin" in text


def test_estimate_json_carries_the_memory_verdict(cli, tmp_path):
    spec = spec_text(tmp_path)
    verdicts = {}
    for micro_batch in (FITS, RISKY, BEYOND):
        code, out, err = cli("estimate", spec, "--micro-batch-size", str(micro_batch), "--json")
        assert code == 0, err
        data = json.loads(out)
        verdicts[micro_batch] = (data["memory_verdict"], data["fits"])
    assert verdicts == {FITS: ("fits", True), RISKY: ("risky", False),
                        BEYOND: ("does_not_fit", False)}


def test_a_campaign_measures_a_risky_layout_and_records_its_oom(cli, tmp_path, runs_dir):
    spec = spec_text(tmp_path, backend={"kind": "simulated", "noise": 0.0},
                     search={"algorithm": "grid"}, budget={"max_trials": 3})
    code, _, err = cli("run", spec)
    assert code == 0, err
    events = journal_events(runs_dir / "edge")
    submitted = {e["config"]["micro_batch_size"] for e in events if e["event"] == "submitted"}
    results = {e["config"]["micro_batch_size"]: e["result"]
               for e in events if e["event"] == "finished"}
    assert submitted == {FITS, RISKY}
    # The simulated device holds what the model predicts, so the risky layout runs out of it.
    assert results[RISKY]["status"] == "oom"
    assert results[RISKY]["extra"]["memory_verdict"] == "risky"
    assert results[FITS]["status"] == "ok"
    assert results[BEYOND]["status"] == "infeasible"
    assert f"memory model's {MEMORY_MARGIN:.0%} margin" in results[BEYOND]["error"]


def test_a_cpu_keeps_the_point_verdict():
    """The margin is measured on GPUs; a CPU layout 2% over its capacity is pruned as before."""
    base = CostModel(MODEL_PRESETS["tiny"], CLUSTER_PRESETS["cpu-local"], 2)
    config = Layout(dp=2, micro_batch_size=1, grad_accum_steps=4)
    memory = base.memory(config)
    capacity = (memory.total - memory.reserve) / GB / (1.02 - 0.08)
    cluster = CLUSTER_PRESETS["cpu-local"].model_copy(update={"memory_gb": capacity})
    cost = CostModel(MODEL_PRESETS["tiny"], cluster, 2)
    estimate = cost.estimate(config)
    assert capacity < estimate.memory_gb < capacity * 1.03
    assert estimate.memory_verdict == "does_not_fit" and estimate.prunable
    pruned = LiveCostModel(cost, []).infeasible(config)
    assert pruned.error == (f"predicted {estimate.memory_gb:.2f} GB per device > "
                            f"{capacity:.2f} GB capacity")


def test_the_margin_counts_only_rows_that_publish_their_memory_settings():
    """A row whose recompute a rule chose (the least the model says fits) fits by construction,
    so the rows that ran set the margin only where they publish recompute and micro-batch; the
    pruned share is still over every row that ran."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory_margin

    def row(ratio: float, published: bool, measured: float | None = None):
        return memory_margin.MemoryRow("f.csv:1", "l", ratio * 80, ratio * 80 - 6.4, 80.0,
                                       measured, "does_not_fit" if ratio > 1 + MEMORY_MARGIN
                                       else "fits", False, published)

    rows = [row(0.9, True)] * 99 + [row(0.9, True, measured=0.9 * 80 - 6.4)]
    rows += [row(1 + MEMORY_MARGIN + 1, False)] * 10  # 9% of the rows, far over capacity
    summary = memory_margin.summary(rows)
    assert (summary["rows_ran"], summary["rows_ran_published"]) == (110, 100)
    assert summary["margin_from_ran_rows"] == 0
    assert summary["pruned_share"] == pytest.approx(10 / 110)


def test_the_margin_is_the_one_the_corpus_implies():
    """MEMORY_MARGIN is what benchmarks/memory_margin.py's rule gives on the corpus as the model
    prices it now, and at most 1% of the rows that ran are pruned."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory_margin

    summary = memory_margin.summary()
    assert summary["rows_ran"] > 500
    assert MEMORY_MARGIN == summary["implied_margin"], summary["implied_margin"]
    assert summary["pruned_share"] <= 0.01, summary["pruned"]
    # The figures README.md and docs/costmodel.md quote are the script's.
    margin, ran_margin = f"{summary['implied_margin']:.0%}", f"{summary['margin_from_ran_rows']:.0%}"
    readme = (ROOT / "README.md").read_text()
    assert f"memory model's error margin ({margin}, from the published measurements" in readme
    costmodel = " ".join((ROOT / "docs/costmodel.md").read_text().split())
    beyond = len(summary["pruned"])
    ran = f"of the {summary['rows_ran']} priced rows that ran"
    for quoted in (f"`MEMORY_MARGIN`, {margin}:",
                   f"the {summary['rows_reporting_memory']} rows that report memory",
                   f"of the {summary['rows_ran_published']} rows that ran and publish",
                   f"predicted beyond {ran_margin}",
                   f"{beyond} {ran} are beyond {margin}" if beyond else
                   f"none {ran} is beyond {margin}"):
        assert quoted in costmodel, quoted
