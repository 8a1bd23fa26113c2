"""ParaTune against DeepSpeed's own autotuner on the same model and space.

The model is examples/deepspeed/train_gpt.py with the arguments of examples/deepspeed.yaml; the
space is that spec's ZeRO stages (0-3) and micro-batch sizes (1, 8) at its global batch. The
autotuner gets them as `zero_optimization.stage: [0, 1, 2, 3]` and
`train_micro_batch_size_per_gpu: [1, 8]` (a list replaces its own micro-batch search) with
`fast: true` (no ZeRO bucket-size sub-space), and profiles steps 2-3 of 4; ParaTune runs the spec
with `budget.max_trials=8` (grid) and again with `search.algorithm=cost-guided`. Results go to
a table: trials, wall time to the best, total wall time, best config, samples/s and tokens/s.

Run by hand from the repository root (not in tests; 15-20 min on a 2-core CPU machine):

    .venv/bin/python benchmarks/deepspeed_autotuner.py [--workdir /tmp/ds-autotune]
        [--skip-autotuner] [--skip-paratune] [--json out.json]

What the autotuner needs on a CPU machine (DeepSpeed 0.19.8; see docs/benchmarks.md):
- `tabulate` (`pip install tabulate`, or `deepspeed[autotuning]`);
- a hostfile (`localhost slots=2`, written here), since without one the CPU accelerator reports
  one device and the autotuner asserts on `--num_gpus 2`; with a hostfile the launcher checks
  `ssh localhost hostname` before every experiment, so passwordless ssh to localhost (an sshd
  bound to 127.0.0.1 and a key for the user) must work;
- with mlflow installed, `MLFLOW_RUN_ID` in the environment (it reads it unconditionally);
  this script creates a run in an SQLite store in the work directory when it is unset;
- `DS_ACCELERATOR=cpu`. Without `pdsh`, each experiment's clean-up (`pdsh ... pkill -f <name>`)
  fails in its thread with FileNotFoundError after the experiment has ended; that is harmless.
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


def spec_args(spec: dict, total_steps: int) -> list[str]:
    values = {"total_steps": total_steps, "seq_len": spec["model"]["seq_len"]}
    return [str(a).format(**values) for a in spec["trial"]["deepspeed"]["args"]]


def autotuner_config(spec: dict, workdir: Path, start: int, end: int) -> dict:
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
            "autotuning": {"enabled": True, "fast": True, "tuner_type": "gridsearch",
                           "metric": "throughput", "start_profile_step": start,
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


def run_autotuner(spec: dict, workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    start_step, end_step = 2, 3  # the engine exits at global step end + 1 = 4, as ParaTune's 1 + 3
    cfg = workdir / "ds_autotune.json"
    cfg.write_text(json.dumps(autotuner_config(spec, workdir, start_step, end_step), indent=2))
    hostfile = workdir / "hostfile"
    hostfile.write_text(f"localhost slots={spec['scale']['gpus_per_node']}\n")
    script = ROOT / spec["trial"]["workdir"] / spec["trial"]["deepspeed"]["script"]
    # `tune`, not `run`: `run` then trains the winner with the same ds_config, whose metric_path
    # points into the winner's folder, so it overwrites the metrics.json measured while tuning.
    cmd = [str(BIN / "deepspeed"), "--autotuning", "tune", "--hostfile", str(hostfile),
           "--num_gpus", str(spec["scale"]["gpus_per_node"]), str(script),
           *spec_args(spec, 10), "--deepspeed", "--deepspeed_config", str(cfg)]
    env = {**os.environ, **spec["trial"].get("env", {}), "DS_ACCELERATOR": "cpu",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **mlflow_run_id(workdir)}
    began = time.time()
    with open(workdir / "autotuner.log", "w") as log:
        rc = subprocess.run(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            check=False).returncode
    result = collect_autotuner(workdir / "autotuning_results", began, spec["model"]["seq_len"])
    result.update(rc=rc, wall_s=time.time() - began,
                  log_tail=(workdir / "autotuner.log").read_text(errors="replace")[-3000:])
    return result


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
        row["config"] = (f"z{ds.get('zero_optimization', {}).get('stage')}-"
                         f"mbs{ds.get('train_micro_batch_size_per_gpu')}-"
                         f"ga{ds.get('gradient_accumulation_steps')}")
        trials.append(row)
    trials.sort(key=lambda r: r["started"])
    ok = [t for t in trials if t["status"] == "ok"]
    best = max(ok, key=lambda t: t["samples_per_s"]) if ok else None
    summary = results_dir / "summary.txt"
    tuned = re.search(r"Tuning completed in (\d+):(\d+):(\d+(?:\.\d+)?)",
                      summary.read_text()) if summary.exists() else None
    return {"tool": "DeepSpeed autotuner (fast, gridsearch)",
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
    env = {**os.environ, "PARATUNE_RUNS_DIR": str(runs)}
    began = time.time()
    with open(workdir / f"{name}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            check=False).returncode
    result = collect_paratune(runs / name / "journal.jsonl", spec["model"]["seq_len"], began)
    result.update(tool=f"ParaTune ({' '.join(overrides)})", rc=rc, wall_s=time.time() - began)
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
                config=f"z{c['zero_stage']}-mbs{c['micro_batch_size']}-ga{c['grad_accum_steps']}")
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
    args = parser.parse_args()
    spec = yaml.safe_load(SPEC.read_text())
    workdir = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    results = []
    if not args.skip_autotuner:
        results.append(run_autotuner(spec, workdir))
        if not results[-1]["trials"]:
            print(f"autotuner ran no experiment (exit {results[-1]['rc']}):\n{results[-1]['log_tail']}")
    if not args.skip_paratune:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        results.append(run_paratune(spec, workdir, f"ds-grid-{stamp}", ["budget.max_trials=8"]))
        results.append(run_paratune(spec, workdir, f"ds-cost-guided-{stamp}",
                                    ["budget.max_trials=8", "search.algorithm=cost-guided"]))
    for r in results:
        print(f"\n{r['tool']} (exit {r['rc']}):")
        for t in r["trials"]:
            measured = (f"{t['samples_per_s']:.1f} samples/s" if "samples_per_s" in t
                        else f"{t['tokens_per_s']:.0f} tokens/s" if t.get("tokens_per_s") else "")
            print(f"  {t['config']:<14} {t['status']:<7} {t['started']:7.1f}-{t['finished']:7.1f} s "
                  f"{measured} {(t.get('error') or '')[:160]}")
    print("\n" + table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
