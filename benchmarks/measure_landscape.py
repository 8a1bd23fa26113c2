"""Measure a landscape no cost model wrote: the built-in trainer's grid on this machine's CPU,
every layout run REPEATS times, written as a table that benchmarks/search_efficiency.py replays
(benchmarks/tabulated.py), as Syne Tune's blackbox repository replays recorded sweeps.

Each repeat is a grid campaign of its own (`paratune run`, one trial at a time), so a layout's
measurements are minutes apart, as a campaign's repeats are.

Run: .venv/bin/python benchmarks/measure_landscape.py [--grid cpu-tiny-grid|cpu-moe-grid|cpu-cp-grid]
         [--repeats 3] [--steps N --warmup N] [--out benchmarks/landscapes/<grid>.json]

Longer trials (--steps) shrink the step-time median's own spread; what is left between
repeats is the run-to-run noise a campaign meets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_ONE_AT_A_TIME = ["search.algorithm=grid", "budget.max_concurrent=1", "tracking.enabled=false"]
# name -> (spec, overrides, what was measured)
GRIDS = {
    "cpu-tiny-grid": ("examples/quickstart.yaml", [
        "space.zero_stage=[0, 1, 2, 3]", "space.micro_batch_size=[1, 2, 4]",
        "space.activation_checkpointing=[none, full]", "budget.max_trials=24",
        *RUN_ONE_AT_A_TIME], "the built-in trainer, tiny LLaMA, 2 ranks (gloo) on this "
        "machine's CPU"),
    "cpu-moe-grid": ("examples/moe-cpu.yaml", [
        "space.ep=[1, 2]", "space.zero_stage=[0, 1, 3]", "space.micro_batch_size=[1, 2, 4]",
        "space.activation_checkpointing=[none]", "budget.max_trials=18", *RUN_ONE_AT_A_TIME],
        "the built-in trainer, tiny mixture of experts (8 experts, top-2), 2 ranks (gloo) "
        "on this machine's CPU"),
    "cpu-cp-grid": ("examples/long-context-cpu.yaml", [
        "space.cp_comm_type=[allgather, a2a, p2p]", "space.zero_stage=[0, 1]",
        "space.micro_batch_size=[1, 2, 4]", "space.activation_checkpointing=[none, full]",
        "budget.max_trials=26", *RUN_ONE_AT_A_TIME], "the built-in trainer, tiny LLaMA at "
        "512-token sequences, context parallelism over 2 ranks (gloo) on this machine's CPU"),
}


def run_repeat(runs_dir: Path, grid: str, repeat: int, trial_overrides: list[str]) -> list[dict]:
    """One grid campaign; its finished trials' layouts and results."""
    spec, overrides, _ = GRIDS[grid]
    overrides = [*overrides, *trial_overrides]
    name = f"landscape-{grid}-r{repeat}"
    command = [sys.executable, "-m", "orchestrator.cli", "run", spec, "--set", f"name={name}",
               *[a for s in overrides for a in ("--set", s)]]
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ,
                                                       "PARATUNE_RUNS_DIR": str(runs_dir)})
    events = [json.loads(line) for line in (runs_dir / name / "journal.jsonl").read_text()
              .splitlines() if line.strip()]
    return [e for e in events if e["event"] == "finished"]


def table(repeats: list[list[dict]]) -> list[dict]:
    """One row per layout: its parameters and every repeat's tokens/s (None where it failed)."""
    rows: dict[str, dict] = {}
    for finished in repeats:
        for event in finished:
            key = json.dumps(event["config"], sort_keys=True)
            row = rows.setdefault(key, {"config": event["config"], "tokens_per_s": [],
                                        "status": []})
            result = event["result"]
            row["status"].append(result["status"])
            row["tokens_per_s"].append(result.get("tokens_per_s"))
    return list(rows.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", choices=sorted(GRIDS), default="cpu-tiny-grid")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, help="measured steps a trial (default: the spec's)")
    parser.add_argument("--warmup", type=int, help="warm-up steps a trial (default: the spec's)")
    parser.add_argument("--out", help="default: benchmarks/landscapes/<grid>.json")
    args = parser.parse_args()
    out = args.out or str(ROOT / f"benchmarks/landscapes/{args.grid}.json")
    spec, overrides, what = GRIDS[args.grid]
    given = [(flag, key, value) for flag, key, value in (
        ("steps", "trial.steps", args.steps), ("warmup", "trial.warmup_steps", args.warmup))
        if value]  # the trial-length flags set, as (flag, spec key, value)
    trial_overrides = [f"{key}={value}" for _, key, value in given]
    started = time.time()
    with tempfile.TemporaryDirectory() as runs:
        repeats = [run_repeat(Path(runs), args.grid, r, trial_overrides)
                   for r in range(args.repeats)]
    Path(out).write_text(json.dumps({
        "name": args.grid,
        "what": what,
        "command": " ".join([".venv/bin/python benchmarks/measure_landscape.py",
                             f"--grid {args.grid} --repeats {args.repeats}",
                             *(f"--{flag} {value}" for flag, _, value in given)]),
        "spec": spec, "overrides": [*overrides, *trial_overrides], "machine": f"{platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "seconds": round(time.time() - started),
        "layouts": table(repeats)}, indent=1) + "\n")
    print(f"wrote {out} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
