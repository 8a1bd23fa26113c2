"""ParaTune against DeepSpeed's own autotuner on the same model and space.

The model is examples/deepspeed/train_gpt.py with the arguments of examples/deepspeed.yaml. The
space is ZeRO stages (2, 3) x micro-batch sizes (1, 8) at that spec's global batch, with the
ZeRO knobs the autotuner tunes besides them: ParaTune gets `space.overlap_comm=[false, true]`
and `space.bucket_size=[50000000, 500000000]` (two of the autotuner's three bucket values),
runs the grid (its whole size as the budget), then cost-guided. The autotuner gets the stages
and a micro-batch list (which replaces its own micro-batch search) with `fast: false`: after a
stage's micro-batch runs it tunes that stage's DEFAULT_TUNING_SPACE_ZERO_<n> (overlap_comm,
reduce_scatter, reduce and allgather buckets of 5e7/5e8/1e9, contiguous_gradients, and at stage
3 allgather_partitions; a ds_config cannot narrow it), for a later stage only when its best
micro-batch grew; grid order, `tuner_num_trials` (12 here, 50 by default) and early stopping
5. Both profile steps 2-3 of 4. The table: trials, wall time to the best, total wall time, best
config, samples/s and tokens/s.

Run by hand from the repository root (not in tests; 25-35 min on a 2-core CPU machine);
`--stages`, `--micro-batches` and `--tuner-trials` narrow it, `--fix-hostfile` below:

    .venv/bin/python benchmarks/deepspeed_autotuner.py [--workdir /tmp/ds-autotune]
        [--skip-autotuner] [--skip-paratune] [--json out.json] [--fix-hostfile]

What the autotuner needs on a CPU machine (DeepSpeed 0.19.8; docs/benchmarks.md says why):
`tabulate`; a hostfile (`localhost slots=2`, written here) and so passwordless ssh to localhost;
`MLFLOW_RUN_ID` when mlflow is installed (created here in an SQLite store when unset);
`DS_ACCELERATOR=cpu`. Without `pdsh` each experiment's clean-up fails in its thread after the
experiment has ended, which is harmless.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "deepspeed.yaml"
BIN = Path(sys.executable).parent
OVERLAP, BUCKETS = [False, True], [50_000_000, 500_000_000]


def paratune_space(spec: dict) -> list[str]:
    """ParaTune's overrides: the benchmark's stages and micro-batches, overlap and buckets, and
    a budget of the whole grid."""
    space = spec["space"]
    size = len(space["zero_stage"]) * len(space["micro_batch_size"]) * len(OVERLAP) * len(BUCKETS)
    return [f"space.zero_stage={space['zero_stage']}",
            f"space.micro_batch_size={space['micro_batch_size']}",
            f"space.overlap_comm={json.dumps(OVERLAP)}", f"space.bucket_size={BUCKETS}",
            f"budget.max_trials={size}", "trial.timeout_s=900"]  # the first trial builds an op


def spec_args(spec: dict, total_steps: int) -> list[str]:
    values = {"total_steps": total_steps, "seq_len": spec["model"]["seq_len"]}
    return [str(a).format(**values) for a in spec["trial"]["deepspeed"]["args"]]


def autotuner_config(spec: dict, workdir: Path, start: int, end: int, trials: int) -> dict:
    base = json.loads((ROOT / spec["trial"]["workdir"] / spec["trial"]["deepspeed"]["config"]).read_text())
    scale = spec["scale"]
    dp = scale["nodes"] * scale["gpus_per_node"]
    mbs = sorted(spec["space"]["micro_batch_size"])
    gas, rest = divmod(scale["global_batch_size"], mbs[-1] * dp)
    assert gas >= 1 and not rest, "the largest micro-batch x dp must divide the global batch"
    return {**base,
            "train_micro_batch_size_per_gpu": mbs,
            "gradient_accumulation_steps": gas,
            "zero_optimization": {"stage": sorted(spec["space"]["zero_stage"])},
            "autotuning": {"enabled": True, "fast": False, "tuner_type": "gridsearch",
                           "tuner_num_trials": trials, "metric": "throughput",
                           "start_profile_step": start,
                           "end_profile_step": end, "overwrite": True,
                           "results_dir": str(workdir / "autotuning_results"),
                           "exps_dir": str(workdir / "autotuning_exps")}}


def mlflow_run_id(workdir: Path) -> dict[str, str]:
    if os.environ.get("MLFLOW_RUN_ID"):
        return {}
    try:
        from mlflow import MlflowClient
    except ImportError:
        return {}
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(f"ds-autotuner-{int(time.time())}",
                                   artifact_location=(workdir / "mlartifacts").as_uri())
    return {"MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": client.create_run(exp).info.run_id}


def last_error(stderr: Path) -> str:
    lines = [text.strip() for text in stderr.read_text(errors="replace").splitlines()] if stderr.exists() else []
    hits = [text for text in lines if "Error" in text and not text.startswith("File ")]
    return (hits or lines or ["(no stderr)"])[-1][:300]


def run_autotuner(spec: dict, workdir: Path, trials: int, fix_hostfile: bool) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    start_step, end_step = 2, 3  # the engine exits at global step end + 1 = 4, as ParaTune's 1 + 3
    cfg = workdir / "ds_autotune.json"
    config = autotuner_config(spec, workdir, start_step, end_step, trials)
    cfg.write_text(json.dumps(config, indent=2))
    hostfile = workdir / "hostfile"
    hostfile.write_text(f"localhost slots={spec['scale']['gpus_per_node']}\n")
    script = ROOT / spec["trial"]["workdir"] / spec["trial"]["deepspeed"]["script"]
    # `tune`, not `run`: `run` then trains the winner with the same ds_config, whose metric_path
    # points into the winner's folder, so it overwrites the metrics.json measured while tuning.
    launcher = ([sys.executable, str(Path(__file__).with_name("deepspeed_hostfile_fix.py"))]
                if fix_hostfile else [str(BIN / "deepspeed")])  # the fix: DeepSpeed's KeyError
    cmd = [*launcher, "--autotuning", "tune", "--hostfile", str(hostfile),
           "--num_gpus", str(spec["scale"]["gpus_per_node"]), str(script),
           *spec_args(spec, 10), "--deepspeed", "--deepspeed_config", str(cfg)]
    # Each tool builds DeepSpeed's shared-memory comm op once, in its own folder (one shared
    # with torchrun's runs was built again, by another command, when the launcher changed).
    env = {**os.environ, **spec["trial"].get("env", {}), "DS_ACCELERATOR": "cpu",
           "TORCH_EXTENSIONS_DIR": str(workdir / "torch-extensions-autotuner"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **mlflow_run_id(workdir)}
    began = time.time()
    with open(workdir / "autotuner.log", "w") as log:
        rc = subprocess.run(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            check=False).returncode
    result = collect_autotuner(workdir / "autotuning_results", began, spec["model"]["seq_len"])
    result.update(rc=rc, wall_s=time.time() - began, tool=result["tool"] + (
        " (sub-space hostfile fixed)" if fix_hostfile else ""),
                  log_tail=(workdir / "autotuner.log").read_text(errors="replace")[-3000:])
    return result


# Sub-knobs of the autotuner's space that ParaTune's layouts leave to the base config.
AUTOTUNER_ONLY = ("reduce_scatter", "contiguous_gradients", "allgather_partitions")


def label(stage, mbs, gas, overlap, reduce_bucket, gather_bucket) -> str:
    """z2-mbs1-ga8-ovl1-b5e+07 (one bucket size) or -b5e+07/5e+08 (reduce/allgather)."""
    size = "dflt" if reduce_bucket is None else f"{float(reduce_bucket):.0e}"
    if gather_bucket is not None and float(gather_bucket) != float(reduce_bucket or 0):
        size += f"/{float(gather_bucket):.0e}"
    ovl = "-" if overlap is None else int(bool(overlap))
    return f"z{stage}-mbs{mbs}-ga{gas}-ovl{ovl}-b{size}"


def collect_autotuner(results_dir: Path, began: float, seq_len: int) -> dict:
    """The autotuner's experiments from its results folder: each one's ds_config.json is written
    as it is launched, its stdout.log closed as it ends, and its metrics.json holds DeepSpeed's
    `throughput` (samples/s) when it ran to its last profiled step."""
    trials = []
    for d in sorted(results_dir.glob("*/")):
        if not (d / "exp.json").exists():
            continue
        ds = json.loads((d / "exp.json").read_text())["ds_config"]
        metrics = d / "metrics.json"
        row = {"name": d.name, "started": (d / "ds_config.json").stat().st_mtime - began,
               "finished": (d / "stdout.log").stat().st_mtime - began}
        if d.name == "profile_model_info":
            row.update(status="profile")
        elif metrics.exists():
            m = json.loads(metrics.read_text().splitlines()[0])
            row.update(status="ok", samples_per_s=m["throughput"], latency_ms=m["latency"] / 1000)
        else:
            row.update(status="failed", error=last_error(d / "stderr.log"))
        zero = ds.get("zero_optimization", {})
        row["config"] = label(zero.get("stage"), ds.get("train_micro_batch_size_per_gpu"),
                              ds.get("gradient_accumulation_steps"), zero.get("overlap_comm"),
                              zero.get("reduce_bucket_size"), zero.get("allgather_bucket_size"))
        row["other"] = {k: v for k, v in zero.items() if k in AUTOTUNER_ONLY}
        trials.append(row)
    trials.sort(key=lambda r: r["started"])
    ok = [t for t in trials if t["status"] == "ok"]
    best = max(ok, key=lambda t: t["samples_per_s"]) if ok else None
    summary = results_dir / "summary.txt"
    tuned = re.search(r"Tuning completed in (\d+):(\d+):(\d+(?:\.\d+)?)",
                      summary.read_text()) if summary.exists() else None
    return {"tool": "DeepSpeed autotuner",
            "tuning_s": tuned and int(tuned[1]) * 3600 + int(tuned[2]) * 60 + float(tuned[3]),
            "trials": [t for t in trials if t["status"] != "profile"],
            "extra_runs": len([t for t in trials if t["status"] == "profile"]),
            "best": best and {"config": best["config"], "samples_per_s": best["samples_per_s"],
                              "tokens_per_s": best["samples_per_s"] * seq_len,
                              "time_to_best_s": best["finished"]}}


def run_paratune(spec: dict, workdir: Path, name: str, overrides: list[str]) -> dict:
    runs = workdir / "paratune-runs"
    cmd = [str(BIN / "paratune"), "run", str(SPEC.relative_to(ROOT)), "--set", f"name={name}"]
    for o in overrides:
        cmd += ["--set", o]
    env = {**os.environ, "PARATUNE_RUNS_DIR": str(runs),
           "TORCH_EXTENSIONS_DIR": str(workdir / "torch-extensions-paratune")}
    began = time.time()
    with open(workdir / f"{name}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            check=False).returncode
    result = collect_paratune(runs / name / "journal.jsonl", spec["model"]["seq_len"], began)
    algorithm = "cost-guided" if "search.algorithm=cost-guided" in overrides else "grid"
    result.update(tool=f"ParaTune ({algorithm})", rc=rc, wall_s=time.time() - began)
    return result


def collect_paratune(journal: Path, seq_len: int, began: float | None = None) -> dict:
    """Trials from a campaign's journal: `submitted` and `finished` times (from `began`, else
    the campaign's first event), each result's status and tokens/s."""
    events = [json.loads(line) for line in journal.read_text().splitlines() if line]
    t0 = began if began is not None else events[0]["time"]
    trials: dict[str, dict] = {}
    for e in events:
        if e["event"] == "submitted":
            trials.setdefault(e["trial_id"], {})["started"] = e["time"] - t0
        elif e["event"] == "finished":
            c, r = e["config"], e["result"]
            trials.setdefault(e["trial_id"], {}).update(
                finished=e["time"] - t0, status=r["status"], tokens_per_s=r.get("tokens_per_s"),
                error=r.get("error"),
                config=label(c["zero_stage"], c["micro_batch_size"], c["grad_accum_steps"],
                             c.get("overlap_comm"), c.get("bucket_size"), c.get("bucket_size")))
    rows = [{"trial_id": k, **v} for k, v in trials.items() if "status" in v]
    rows = [{"started": r.get("finished"), **r} for r in rows]  # infeasible: never submitted
    ok = [t for t in rows if t["status"] == "ok" and t["tokens_per_s"]]
    best = max(ok, key=lambda t: t["tokens_per_s"]) if ok else None
    return {"trials": [t for t in rows if t["status"] != "infeasible"], "extra_runs": 0,
            "last_event_s": events[-1]["time"] - t0,
            "best": best and {"config": best["config"], "tokens_per_s": best["tokens_per_s"],
                              "samples_per_s": best["tokens_per_s"] / seq_len,
                              "time_to_best_s": best["finished"]}}


def table(results: list[dict]) -> str:
    out = [("| tool | trials run | wall time to best | total wall time | best config "
            "| best samples/s | best tokens/s |"), "|---|---|---|---|---|---|---|"]
    for r in results:
        b = r["best"]
        runs = str(len(r["trials"])) + (f" (+{r['extra_runs']} profile)" if r["extra_runs"] else "")
        cells = ([f"{b['time_to_best_s']:.0f} s", f"{r['wall_s']:.0f} s", b["config"],
                  f"{b['samples_per_s']:.1f}", f"{b['tokens_per_s']:.0f}"] if b else
                 ["-", f"{r['wall_s']:.0f} s", "-", "-", "-"])
        out.append("| " + " | ".join([r["tool"], runs, *cells]) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ds-autotune"))
    parser.add_argument("--skip-autotuner", action="store_true")
    parser.add_argument("--skip-paratune", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--stages", default="2,3", help="ZeRO stages, comma-separated")
    parser.add_argument("--micro-batches", default="1,8", help="micro-batch sizes")
    parser.add_argument("--fix-hostfile", action="store_true",
                        help="give the autotuner's sub-space experiments their hostfile")
    parser.add_argument("--tuner-trials", type=int, default=12,
                        help="the autotuner's tuner_num_trials per stage's sub-space")
    args = parser.parse_args()
    spec = yaml.safe_load(SPEC.read_text())
    spec["space"].update(zero_stage=[int(x) for x in args.stages.split(",")],
                         micro_batch_size=[int(x) for x in args.micro_batches.split(",")])
    workdir = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    results = []
    if not args.skip_autotuner:
        results.append(run_autotuner(spec, workdir, args.tuner_trials, args.fix_hostfile))
        if not results[-1]["trials"]:
            print(f"autotuner ran no experiment (exit {results[-1]['rc']}):\n{results[-1]['log_tail']}")
    if not args.skip_paratune:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        space = paratune_space(spec)
        results.append(run_paratune(spec, workdir, f"ds-grid-{stamp}", space))
        results.append(run_paratune(spec, workdir, f"ds-cost-guided-{stamp}",
                                    [*space, "search.algorithm=cost-guided"]))
    for r in results:
        print(f"\n{r['tool']} (exit {r['rc']}):")
        for t in r["trials"]:
            measured = (f"{t['samples_per_s']:.1f} samples/s" if "samples_per_s" in t
                        else f"{t['tokens_per_s']:.0f} tokens/s" if t.get("tokens_per_s") else "")
            print(f"  {t['config']:<34} {t['status']:<7} "
                  f"{t['started']:7.1f}-{t['finished']:7.1f} s "
                  f"{measured} {t.get('other') or ''} {(t.get('error') or '')[:160]}")
    print("\n" + table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
