"""Whether the cost-guided searcher trusts a cost model that is right: trials and GPU-hours to
within 3% of the best on textbook landscapes.

A textbook landscape is generated, shaped exactly like the model: the simulated backend
answers each trial with the cost model's own throughput times ±2% measurement noise (no
per-knob perturbation, no quirks), so the truth is the model itself and the true best is the
model's best over the whole space (search_efficiency.py's `landscape`, computed exhaustively).
It checks only that the searcher follows a right model; it says nothing of a wrong one. The
quirky variant of the 22B GPT adds the simulated backend's multi-knob quirks, so there the
model is wrong; it is reported apart and not held to the textbook bar.

Campaigns run in-process through search_efficiency.py's `run_one` (the controller's pruning,
repeats and stop rule; GPU-hours as world size x its TRIAL_STEPS x the simulated step time).
Per landscape over the seeds: trials to 3% (median, worst), GPU-hours to 3% (median), and the
trials the campaign ran before it stopped itself or reached MAX_TRIALS (median).

Run: .venv/bin/python benchmarks/textbook_landscapes.py [--seeds 10] [--landscapes a,b]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/search_efficiency.py

from search_efficiency import AMSP_SPACE, LANDSCAPES, MAX_TRIALS, WITHIN, fmt, run_one

NOISE = 0.02  # the measurement jitter of a textbook landscape
QUIRKS = 1.0  # interaction strength of the quirky variant (backends/quirks.py)
GPT_22B_16_NODES = ("examples/frontier-slurm.yaml", ["scale.nodes=16"])
# name: (spec, overrides, per-knob perturbation, interaction strength), as LANDSCAPES reads them
TEXTBOOK = {
    "textbook-gpt-22b-frontier-16n": (*GPT_22B_16_NODES, 0.0, 0.0),
    "textbook-gpt-175b-frontier-128n": ("examples/frontier-175b.yaml", [], 0.0, 0.0),
    "textbook-gpt-1t-frontier-384n": ("examples/frontier-1t.yaml", [], 0.0, 0.0),
    "textbook-llama-70b-h100-8n": ("examples/megatron-lm.yaml", [], 0.0, 0.0),
    "textbook-llama3-8b-h100-1n": ("examples/torchtitan.yaml", [], 0.0, 0.0),
    "textbook-llama-7b-a800-amsp": ("examples/amsp-llama-7b.yaml", AMSP_SPACE, 0.0, 0.0),
}
QUIRKY = {"quirky-gpt-22b-frontier-16n": (*GPT_22B_16_NODES, 0.0, QUIRKS)}
LANDSCAPES.update(TEXTBOOK | QUIRKY)  # run_one looks a landscape up by name there


def campaign(name: str, seed: int, max_trials: int = MAX_TRIALS) -> dict:
    """One cost-guided campaign on landscape `name`, as search_efficiency.py runs it."""
    return run_one((name, "cost-guided", seed, NOISE, max_trials, 0.0))


def summary(name: str, runs: list[dict]) -> dict:
    reached = [r["reached"] for r in runs]
    missed = sum(r is None for r in reached)
    hours = [r["gpu_hours_reached"] for r in runs if r["reached"] is not None]
    return {"landscape": name, "seeds": len(runs), "missed": missed,
            "median": statistics.median(r for r in reached if r is not None) if hours else None,
            "worst": None if missed else max(reached),
            "gpu_hours_median": statistics.median(hours) if hours else None,
            "trials_run": statistics.median(r["trials"] for r in runs),
            "kind": "generated (textbook: the model is the truth)" if name in TEXTBOOK
            else "generated (the model plus hidden quirks)"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--landscapes", default=",".join([*TEXTBOOK, *QUIRKY]))
    parser.add_argument("--max-trials", type=int, default=MAX_TRIALS)
    args = parser.parse_args()
    started = time.time()
    print(f"cost-guided, seeds 0-{args.seeds - 1}, noise {NOISE:g}, up to {args.max_trials} "
          f"trials; trials and GPU-hours to within {WITHIN:.0%} of the best\n")
    print("| landscape | trials to 3%: median | worst | GPU-h to 3%: median | trials run: median "
          "| kind |")
    print("|---|---|---|---|---|---|")
    for name in args.landscapes.split(","):
        t = summary(name, [campaign(name, seed, args.max_trials) for seed in range(args.seeds)])
        worst = "-" if t["worst"] is None else t["worst"]
        missed = f" ({t['missed']} missed)" if t["missed"] else ""
        print(f"| {name} | {fmt(t['median'] or float('inf'))}{missed} | {worst} | "
              f"{fmt(t['gpu_hours_median'] or float('inf'))} | {t['trials_run']:g} | "
              f"{t['kind']} |", flush=True)
    print(f"\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
