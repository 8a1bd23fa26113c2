"""Calibration on real CPU trials: 8 torchrun trials of the `tiny` model (ZeRO 0 and 2,
micro-batch 1 and 4, no and full recompute), then `paratune calibrate` on them: how far the
refit model is from the measurements, in sample and held out, and whether it ranks every pair
of trials whose throughputs differ by more than this machine's own swings.

A benchmark, not a test: the throughputs it ranks are measured on a shared machine, where a
neighbour's load can make a full-recompute trial faster than its no-recompute twin. Run it on
a quiet machine; docs/costmodel.md quotes its figures.

Run: .venv/bin/python benchmarks/calibration_cpu_trials.py [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# Pairs whose measured throughputs differ by more than this (times the trials' own step-to-step
# spread) are the ones a measurement can order; closer pairs may swap from run to run.
APART = 1.3


def paratune(*args: str, runs_dir: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                          capture_output=True, text=True,
                          env={**os.environ, "PARATUNE_RUNS_DIR": str(runs_dir),
                               "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        sys.exit(f"paratune {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def step_spread(journal: Path) -> float:
    """The median over the trials of p90/median step time: near 1.0 on a quiet machine."""
    results = [e["result"] for line in journal.read_text().splitlines() if line.strip()
               for e in [json.loads(line)] if e.get("event") == "finished"
               and e["result"]["status"] == "ok"]
    return statistics.median(r["step_time_p90_s"] / r["step_time_s"] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    spec = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    spec.update(name="calib", search={"algorithm": "grid"}, budget={"max_trials": 8},
                space={**spec["space"], "zero_stage": [0, 2], "micro_batch_size": [1, 4],
                       "activation_checkpointing": ["none", "full"]},
                trial={**spec.get("trial", {}), "steps": 8, "warmup_steps": 2, "timeout_s": 300})
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        spec_file = Path(tmp) / "calib.yaml"
        spec_file.write_text(yaml.safe_dump(spec))
        paratune("run", str(spec_file), runs_dir=runs)
        fit = json.loads(paratune("calibrate", "calib", "--json", runs_dir=runs))
        held = json.loads(paratune("calibrate", "calib", "--held-out", "--json", runs_dir=runs))
        spread = step_spread(runs / "calib" / "journal.jsonl")
    apart = [(a, b) for a, b in itertools.permutations(fit["per_trial"], 2)
             if a["measured_tokens_per_s"] > APART * spread * b["measured_tokens_per_s"]]
    ordered = sum(a["predicted_tokens_per_s"] > b["predicted_tokens_per_s"] for a, b in apart)
    summary = {
        "trials": fit["trials"], "median_abs_error": fit["median_abs_error"],
        "spearman": fit["spearman"],
        "held_out_median_abs_error": held["held_out"]["median_abs_error"],
        "step_spread": spread, "pairs_apart": len(apart), "pairs_ordered": ordered,
    }
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"{summary['trials']} trials; calibrated: median |error| "
          f"{summary['median_abs_error']:.1%}, Spearman {summary['spearman']:.2f}; held out "
          f"{summary['held_out_median_abs_error']:.1%}")
    print(f"pairs apart by more than {APART} x the step spread ({spread:.2f}): {len(apart)}, "
          f"of which the calibrated model orders {ordered}")


if __name__ == "__main__":
    main()
