"""`paratune profile`: the fit of measured GEMMs and collectives to a cluster preset, the preset
file a spec names, and (slow) the profiling job run through the local backend."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import EXAMPLES, write_spec

from orchestrator.costmodel.collectives import Fabric
from orchestrator.costmodel.profile_fit import fit_gemm, fit_link, profiled_cluster
from orchestrator.presets import CLUSTER_PRESETS
from orchestrator.campaign_spec import load_spec

CPU = CLUSTER_PRESETS["cpu-local"]


def synthetic_profile(eff=0.5, hm=64.0, hn=16.0, bw=2e9, alpha=300e-6) -> dict:
    gemm = [{"m": m, "n": n, "k": 512, "tflops": 0.1 * eff * m / (m + hm) * n / (n + hn)}
            for m in (16, 64, 256, 1024) for n in (16, 64, 256, 1024)]
    collectives = []
    for op, rounds in (("all_reduce", 2), ("all_gather", 1)):
        for v in (4096 * 4**i for i in range(7)):
            seconds = rounds * (0.5 * v / bw + alpha)
            collectives.append({"op": op, "group": 2, "bytes": v, "seconds": seconds})
    return {"device": "cpu", "world_size": 2, "layers": gemm, "collectives": collectives,
            "optimizer": {"params": 4_000_000, "seconds": 0.01}}


def test_fits_recover_known_constants():
    profile = synthetic_profile()
    gemm = fit_gemm(profile["layers"], peak_tflops=0.1)
    assert (gemm.efficiency, gemm.half_m, gemm.half_n) == pytest.approx((0.5, 64.0, 16.0))
    link = fit_link(profile["collectives"])
    assert link.bandwidth == pytest.approx(2e9, rel=1e-6)
    assert link.latency_s == pytest.approx(300e-6, rel=1e-6)
    assert profiled_cluster(CPU, profile).optimizer_ns_per_param == pytest.approx(2.5)


def test_a_device_faster_than_the_nominal_peak_raises_the_peak_not_the_shape():
    """Measured at up to 1.44x the preset's nominal peak (a CPU here, at its boost clock): the
    preset keeps the fitted shape and the measured speed, with efficiency 1 of a raised peak."""
    profile = synthetic_profile(eff=2.0, hm=128.0, hn=512.0)
    cluster = profiled_cluster(CPU, profile)
    assert cluster.compute_efficiency == 1.0 and (cluster.gemm_half_m, cluster.gemm_half_n) == (
        128.0, 512.0)
    assert cluster.peak_tflops == pytest.approx(2.0 * CPU.peak_tflops)
    for r in profile["layers"]:
        shape = r["m"] / (r["m"] + 128.0) * r["n"] / (r["n"] + 512.0)
        assert cluster.peak_tflops * shape == pytest.approx(r["tflops"])


@pytest.mark.parametrize("base", ["cpu-local", "a800-80g"])
def test_profiled_preset_reproduces_the_measured_collectives(base):
    """Also from a stock preset with per-call and chunk costs (a800-80g's NCCL constants): the
    fitted per-step latency holds them, so the preset drops its own."""
    profile = synthetic_profile()
    stock = CLUSTER_PRESETS[base]
    cluster = profiled_cluster(stock, profile)
    fabric = Fabric.of(cluster, cluster.gpus_per_node, 0.8)
    for r in profile["collectives"]:
        op = fabric.all_reduce if r["op"] == "all_reduce" else fabric.all_gather
        assert op(r["bytes"], 2) == pytest.approx(r["seconds"], rel=1e-6)
    assert cluster.name == f"{base}-profiled" and cluster.peak_tflops == stock.peak_tflops
    assert cluster.inter_node_latency_us >= cluster.intra_node_latency_us


def trainer_steps_of(cluster, compute_scale: float, fsdp_us: float, tp_us: float,
                     half_m: float | None = None) -> dict:
    """The profile's trainer steps as a machine with these software costs would time them;
    with `half_m`, a machine whose step falls with the micro-batch at that rate, and DDP
    timed at the smaller micro-batches too, as the profile job does."""
    import dataclasses

    from jobs.profile import profile_model
    from jobs.profile_trainer_steps import layouts, micro_batch_splits
    from orchestrator.costmodel import CostModel
    from orchestrator.costmodel.trainer_overhead_fit import (
        profile_shape,
        scaled_compute,
        step_config,
    )
    from orchestrator.costmodel.zero_engine import PYTORCH

    model = dataclasses.asdict(profile_model(128, 128))
    shaped = cluster if half_m is None else cluster.model_copy(update={"gemm_half_m": half_m})
    machine = scaled_compute(shaped, compute_scale).model_copy(
        update={"fsdp_call_overhead_us": fsdp_us, "tp_call_overhead_us": tp_us})
    cost = CostModel(profile_shape(model), machine, 2, runtime=PYTORCH)
    micro_batch = 4 if half_m is not None else 2
    rows = [{"layout": name, **layout, "micro_batch_size": micro_batch}
            for name, layout in layouts(2).items()]
    if half_m is not None:
        rows += [{"layout": "ddp", "dp": 2, "micro_batch_size": size,
                  "grad_accum_steps": micro_batch // size}
                 for size in micro_batch_splits(micro_batch)]
    steps = [{**row, "seconds": cost.estimate(step_config(row)).step_time_s} for row in rows]
    return {"model": model, "tokens_per_rank": 128 * micro_batch, "steps": steps}


def test_the_trainers_steps_give_its_compute_rate_and_per_call_software_costs():
    """DDP's step rescales compute; what ZeRO-3 and TP take beyond the rescaled model is
    FSDP2's and DTensor's cost per collective call."""
    fitted = profiled_cluster(CPU, synthetic_profile())
    profile = {**synthetic_profile(), "ranks_per_node": 2,
               "runtime": trainer_steps_of(fitted, 1.3, fsdp_us=800.0, tp_us=2500.0)}
    cluster = profiled_cluster(CPU, profile)
    assert cluster.compute_efficiency == pytest.approx(fitted.compute_efficiency / 1.3)
    assert cluster.fsdp_call_overhead_us == pytest.approx(800.0)
    assert cluster.tp_call_overhead_us == pytest.approx(2500.0)


def test_ddp_at_several_micro_batches_gives_the_trainers_own_shape_rate():
    """The bare-step grid fitted one half-rate micro-batch; the trainer's DDP steps at
    micro-batches 4, 2 and 1 (the same tokens) fall more steeply: the fit takes theirs, and
    still recovers the compute scale and the per-call costs."""
    fitted = profiled_cluster(CPU, synthetic_profile())
    planted = 256.0 if fitted.gemm_half_m != 256.0 else 16.0
    runtime = trainer_steps_of(fitted, 1.3, fsdp_us=800.0, tp_us=2500.0, half_m=planted)
    assert len([r for r in runtime["steps"] if r["layout"] == "ddp"]) == 3
    cluster = profiled_cluster(CPU, {**synthetic_profile(), "ranks_per_node": 2,
                                     "runtime": runtime})
    assert cluster.gemm_half_m == planted
    assert cluster.compute_efficiency == pytest.approx(fitted.compute_efficiency / 1.3)
    assert cluster.fsdp_call_overhead_us == pytest.approx(800.0)
    assert cluster.tp_call_overhead_us == pytest.approx(2500.0)


def test_micro_batch_splits_halve_down_to_one_sequence():
    from jobs.profile_trainer_steps import micro_batch_splits

    assert micro_batch_splits(4) == [2, 1] and micro_batch_splits(2) == [1]
    assert micro_batch_splits(1) == [] and micro_batch_splits(3) == [1]


def test_a_layout_no_slower_than_predicted_costs_nothing_and_one_rank_prices_nothing():
    fitted = profiled_cluster(CPU, synthetic_profile())
    runtime = trainer_steps_of(fitted, 1.0, fsdp_us=0.0, tp_us=0.0)
    for row in runtime["steps"]:
        if row["layout"] != "ddp":
            row["seconds"] *= 0.9
    cluster = profiled_cluster(CPU, {**synthetic_profile(), "runtime": runtime})
    assert (cluster.fsdp_call_overhead_us, cluster.tp_call_overhead_us) == (0.0, 0.0)
    stale = CPU.model_copy(update={"tp_call_overhead_us": 99.0})
    assert profiled_cluster(stale, {**synthetic_profile(), "runtime": None}).tp_call_overhead_us == 0


def test_a_spec_names_a_preset_file(tmp_path, monkeypatch):
    cluster = profiled_cluster(CPU, synthetic_profile())
    preset = tmp_path / "profiled.yaml"
    preset.write_text(yaml.safe_dump(cluster.model_dump()))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(EXAMPLES / "calibration-cpu.yaml", ["cluster=profiled.yaml"])
    assert spec.cluster == cluster


@pytest.mark.parametrize("args,message", [
    (["--nodes", "2"], "--nodes: profiling several nodes needs --spec"),
    (["--spec", str(EXAMPLES / "quickstart.yaml"), "--nodes", "2"],
     "not a node count the local backend profiles"),
    (["--spec", str(EXAMPLES / "amsp-llama-7b.yaml")], "backend.kind is simulated"),
    (["--spec", str(EXAMPLES / "quickstart.yaml"), "--cluster", "a100-80g"],
     "the spec's cluster preset is the one refined"),
    (["--gpus", "3"], "--gpus: 3 is not 1..2"),
])
def test_profile_refuses_what_it_cannot_measure(cli, tmp_path, args, message):
    code, _, err = cli("profile", "--runs-dir", str(tmp_path), *args)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "_profile").exists()


def test_profile_refuses_an_out_it_cannot_write_before_running(cli, tmp_path):
    (tmp_path / "a-file").write_text("")
    for out in (tmp_path / "a-file" / "cpu.yaml", tmp_path):
        code, _, err = cli("profile", "--runs-dir", str(tmp_path / "runs"), "--out", str(out))
        assert code == 2 and f"--out {out}: cannot write" in err and "Traceback" not in err
    code, _, err = cli("profile", "--runs-dir", str(tmp_path / "runs"), "--out", "cpu.preset")
    assert code == 2 and "--out cpu.preset: a preset file's name ends in .yaml" in err
    assert not (tmp_path / "runs").exists()


def test_profile_refuses_several_nodes_on_ray(cli, tmp_path):
    """Ray runs a torchrun job on one node (it gangs only rank-per-task trials), so several
    nodes would measure one node's links and call them the network."""
    spec = write_spec(tmp_path / "ray.yaml", backend={"kind": "ray"}, scale={"nodes": 2})
    code, _, err = cli("profile", "--spec", str(spec), "--runs-dir", str(tmp_path))
    assert code == 2 and "not a node count the ray backend profiles" in err


def test_the_profile_steps_the_trainers_model_at_each_shape(monkeypatch):
    """A training step of jobs/model.py's LLaMA per (m, n), in sequences of at most the
    campaign's length, its rate counted in the cost model's FLOPs."""
    import torch

    from jobs import profile as job

    monkeypatch.setitem(job.GRIDS, "cpu", ((64, 256), (64,)))
    rows = job.model_rates(torch.device("cpu"), torch.float32, seq_len=128)
    assert [(r["m"], r["n"], r["seq_len"]) for r in rows] == [(64, 64, 64), (256, 64, 128)]
    assert all(0 < r["tflops"] < 10 for r in rows)


@pytest.mark.parametrize("preset,seq_len", [("cpu-local", 128), ("a100-80g", 2048)])
def test_the_profiled_sequence_length_defaults_to_what_campaigns_train(preset, seq_len,
                                                                       tmp_path):
    from orchestrator.scheduling.profiling import local_target, profile_request, spec_target
    from orchestrator.trial.folder import TrialFolder

    target = local_target(preset, 1)
    assert target.seq_len == seq_len
    assert local_target(preset, 1, seq_len=512).seq_len == 512
    request = profile_request(TrialFolder(tmp_path / "p"), target, timeout_s=60)
    assert request.run.program == ["-m", "jobs.profile", "--seq-len", str(seq_len)]
    spec = load_spec(EXAMPLES / "quickstart.yaml")
    assert spec_target(spec, None, None).seq_len == spec.model.seq_len
    assert spec_target(spec, None, None, seq_len=64).seq_len == 64


@pytest.mark.slow
def test_profile_job_runs_through_the_local_backend(tmp_path, cli, monkeypatch):
    """Run as the docs say, from a working directory with the default relative runs folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARATUNE_RUNS_DIR", raising=False)
    out = tmp_path / "cpu.yaml"
    code, stdout, err = cli("profile", "--out", "cpu.yaml", "--json")
    assert code == 0, err
    assert (tmp_path / "runs" / "_profile").is_dir()
    data = json.loads(stdout)
    from jobs.profile import GRIDS

    rows, columns = GRIDS["cpu"]
    assert len(data["profile"]["layers"]) == len(rows) * len(columns)
    assert data["profile"]["collectives"] and data["profile"]["seq_len"] == 128
    steps = data["profile"]["runtime"]["steps"]
    assert [s["layout"] for s in steps] == ["ddp", "fsdp", "tp", "ddp"]
    assert [s["micro_batch_size"] for s in steps] == [2, 2, 2, 1]
    assert steps[-1]["grad_accum_steps"] == 2 and all(s["seconds"] > 0 for s in steps)
    spec = load_spec(EXAMPLES / "calibration-cpu.yaml", [f"cluster={out}"])
    assert spec.cluster.name == "cpu-local-profiled" and 0 < spec.cluster.compute_efficiency <= 1
    assert spec.cluster.fsdp_call_overhead_us >= 0 and spec.cluster.tp_call_overhead_us >= 0


@pytest.mark.study  # 14 real trials, about 5 minutes here: run by hand, figures in docs
def test_profiled_preset_predicts_real_cpu_trials_better_than_the_stock_one(tmp_path, runs_dir, cli):
    """14 real torchrun trials (DDP, ZeRO 1-3, TP, PP, micro-batch 1 and 4, full recompute):
    before any calibration, the preset `paratune profile` writes on this machine predicts them
    with a lower median error than the stock `cpu-local` preset; after calibration the model
    ranks them well. docs/costmodel.md quotes the figures of such runs, and the held-out
    errors of calibration from either preset."""
    assert cli("run", str(EXAMPLES / "calibration-cpu.yaml"))[0] == 0
    preset = tmp_path / "profiled.yaml"
    assert cli("profile", "--out", str(preset))[0] == 0
    fits = {}
    for label, extra in (("calibrated", []), ("stock", ["--cluster", "cpu-local"]),
                         ("profiled", ["--cluster", str(preset)])):
        code, out, err = cli("calibrate", "calibration-cpu", *extra, "--held-out", "--json")
        assert code == 0, err
        fits[label] = json.loads(out)
        assert fits[label]["trials"] == 14
    print({k: (round(v["median_abs_error"], 3), round(v["spearman"], 2)) for k, v in fits.items()})
    # Calibrated from each preset with each trial left out in turn: the error on a layout the
    # fit has not seen (`calibrated` and `stock` both refit from cpu-local).
    print({"held_out_from_" + k: round(fits[k]["held_out"]["median_abs_error"], 3)
           for k in ("stock", "profiled")})
    assert fits["profiled"]["median_abs_error"] < fits["stock"]["median_abs_error"]
    assert fits["calibrated"]["median_abs_error"] < 0.15 and fits["calibrated"]["spearman"] >= 0.8
