"""How many measured trials each searcher needs, on landscapes with known optima, in two
families reported apart.

Measured landscapes are recorded sweeps no cost model wrote (benchmarks/landscapes/, replayed
by benchmarks/tabulated.py): each trial answers with one of the layout's recorded
measurements, so the noise is the table's own (`--noise 0` replays their means).

Cost-model landscapes are a published setup answered by the simulated backend (cost model ×
noise): the searchers' own model wrote them, so they flatter the cost-guided searcher;
four hide per-knob perturbations (±20-30%) and six hide quirks that depend on several knobs at
once (orchestrator/backends/quirks.py: a collective off its fast path for some (tp, group
layout) pairs, a kernel fast only for some shapes, an overhead growing with a product of
knobs), so the ground truth differs from the model the searchers see. Eight of them search
expert or context parallelism (benchmarks/landscapes_moe_cp.py). A layout the memory model
rejects costs no trial (the controller prunes it); a layout that runs out of memory does, and
the landscape's best is the best of the layouts that run. Reported per searcher and landscape
over SEEDS seeds: trials to reach within 3% of the landscape's best (median, p90; "-" if not reached in
MAX_TRIALS), regret after 10/20/50 trials, search overhead (ask + tell) per trial, and how
often the named winner (the layout with the best mean over its measurements, repeats
included) is within 3% of the true best ("winner ok").

Run: .venv/bin/python benchmarks/search_efficiency.py [--seeds 20] [--json out.json]
     [--noise 0.05]                                      measurement noise (default 3%)
     [--first-seed 20]                                   seeds 20.. instead of 0..
     [--max-trials 300 --no-stop --searchers cost-guided]  overhead at 300 trials
     [--searchers cost-guided,generative-prior]          beside the reference told the prior
                                                         of a perturbed landscape
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/tabulated.py

from generative_prior import NAME as GENERATIVE_PRIOR
from generative_prior import generative_prior_searcher
from landscapes_moe_cp import LONG_CONTEXT_LANDSCAPES, MOE_LANDSCAPES
from tabulated import TabulatedLandscape

from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search import make_searcher
from orchestrator.spec import load_spec
from orchestrator.spec.planning import cost_model_for

ROOT = Path(__file__).resolve().parents[1]
MAX_TRIALS = 60
WITHIN = 0.03
TRIAL_STEPS = 12  # warm-up and timed steps a trial runs, for its GPU-hours
SEARCHERS = ("random", "grid", "deephyper-cbo", "optuna", "hyperopt", "cost-guided")
REFERENCES = (GENERATIVE_PRIOR,)  # run only when named: generative_prior.py
AMSP_SPACE = ["space.activation_checkpointing=[none, selective, full]"]
LANDSCAPES = {  # name: (spec, overrides, per-knob perturbation, interaction strength)
    "frontier-175b": ("examples/frontier-175b.yaml", [], 0.0, 0.0),
    "frontier-1t": ("examples/frontier-1t.yaml", [], 0.0, 0.0),
    "amsp-llama-7b": ("examples/amsp-llama-7b.yaml", AMSP_SPACE, 0.0, 0.0),
    "amsp-llama-30b": ("examples/amsp-llama-30b.yaml", AMSP_SPACE, 0.0, 0.0),
    "frontier-175b-perturbed": ("examples/frontier-175b.yaml", [], 0.2, 0.0),
    "amsp-llama-7b-perturbed": ("examples/amsp-llama-7b.yaml", AMSP_SPACE, 0.3, 0.0),
    "frontier-175b-interactions": ("examples/frontier-175b.yaml", [], 0.0, 1.0),
    "frontier-1t-interactions": ("examples/frontier-1t.yaml", [], 0.0, 1.0),
    "amsp-llama-7b-interactions": ("examples/amsp-llama-7b.yaml", AMSP_SPACE, 0.0, 1.0),
    "amsp-llama-30b-interactions": ("examples/amsp-llama-30b.yaml", AMSP_SPACE, 0.0, 1.0),
    **MOE_LANDSCAPES, **LONG_CONTEXT_LANDSCAPES,
}


# Measured landscapes: name -> recorded sweep.
MEASURED = {"cpu-tiny-grid": "benchmarks/landscapes/cpu-tiny-grid.json",
            "cpu-tiny-grid-short": "benchmarks/landscapes/cpu-tiny-grid-short.json",
            "cpu-tiny-grid-busy": "benchmarks/landscapes/cpu-tiny-grid-busy.json",
            "cpu-moe-grid": "benchmarks/landscapes/cpu-moe-grid.json",
            "cpu-cp-grid": "benchmarks/landscapes/cpu-cp-grid.json"}
FAMILIES = (("measured", MEASURED), ("cost model", LANDSCAPES))


def landscape(name: str, seed: int, noise: float = 0.03):
    if name in MEASURED:
        table = TabulatedLandscape(ROOT / MEASURED[name], seed, noisy=noise != 0)
        return table.candidates, table.cost, table, table.truth
    path, overrides, perturbation, interactions = LANDSCAPES[name]
    spec = load_spec(path, overrides)
    cost = cost_model_for(spec)
    candidates = spec.search_space().candidates()
    sim = SimulatedBackend(cost, noise=noise, perturbation=perturbation, seed=seed,
                           interactions=interactions)
    truth = {}  # the layouts that run: a perturbed memory can make one the model fits run out
    for config in candidates:
        est = cost.estimate(config)
        if est.fits and sim.run(config, "truth").status != "oom":
            truth[config] = est.tokens_per_s * sim.truth_factor(config.to_params())
    return candidates, cost, sim, truth


def perturbed_only(name: str) -> bool:
    """A cost-model landscape with per-knob perturbations and no quirks: the one kind whose
    prior generative_prior.py can hold."""
    return name in LANDSCAPES and LANDSCAPES[name][2] > 0 and not LANDSCAPES[name][3]


def run_one(args: tuple) -> dict:
    name, algorithm, seed, noise, max_trials, stop_margin = args
    candidates, cost, sim, truth = landscape(name, seed, noise)
    best = max(truth.values())
    if algorithm == GENERATIVE_PRIOR:
        searcher = generative_prior_searcher(*LANDSCAPES[name][2:], candidates, Objective(),
                                             seed=seed, cost_model=cost, stop_margin=stop_margin)
    else:
        searcher = make_searcher(algorithm, candidates, Objective(), seed=seed, cost_model=cost,
                                 stop_margin=stop_margin)
    trials, reached, best_so_far, regret, overhead = 0, None, 0.0, {}, []
    gpu_hours, hours_reached = 0.0, None
    measured: dict = {}  # config -> measured tokens/s, repeats included
    while trials < max_trials:
        start = time.perf_counter()
        proposed = [c for c in (searcher.repeat(trials_left=max_trials - trials),) if c is not None] or searcher.ask(1)
        overhead.append(time.perf_counter() - start)
        if not proposed:
            break
        (config,) = proposed
        if not cost.estimate(config).fits:  # pruned by the controller: free
            searcher.tell(config, TrialResult(status="infeasible"))
            continue
        trials += 1
        result = sim.run(config, f"t{trials}")
        gpu_hours += trial_gpu_hours(config, result)
        start = time.perf_counter()
        searcher.tell(config, result)
        overhead[-1] += time.perf_counter() - start
        if result.ok:
            best_so_far = max(best_so_far, truth.get(config, 0.0))
            measured.setdefault(config, []).append(math.log(result.tokens_per_s))
        if reached is None and best_so_far >= (1 - WITHIN) * best:
            reached, hours_reached = trials, gpu_hours
        for n in (10, 20, 50):
            if trials == n:
                regret[n] = 1 - best_so_far / best
    for n in (10, 20, 50):  # stopped early: its regret stays where it stopped
        regret.setdefault(n, 1 - best_so_far / best)
    winner = max(measured, key=lambda c: statistics.mean(measured[c]), default=None)
    return {"landscape": name, "searcher": algorithm, "seed": seed, "reached": reached,
            "gpu_hours_reached": hours_reached,
            "trials": trials, "regret": regret, "overhead_s": statistics.mean(overhead),
            "winner_ok": winner is not None and truth[winner] >= (1 - WITHIN) * best,
            "winner_regret": 1 - truth[winner] / best if winner is not None else 1.0,
            "winner_measurements": len(measured[winner]) if winner is not None else 0}


def trial_gpu_hours(config, result: TrialResult) -> float:
    """A trial's device time: its ranks for TRIAL_STEPS steps (start-up left out; a trial
    that failed counts none, as it stops early)."""
    step = result.step_time_s if result.ok and result.step_time_s else 0.0
    return config.world_size * step * TRIAL_STEPS / 3600


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def summarize(rows: list[dict]) -> list[dict]:
    table = []
    for family, names in FAMILIES:
        for name, algorithm in ((n, a) for n in names for a in SEARCHERS + REFERENCES):
            runs = [r for r in rows if r["landscape"] == name and r["searcher"] == algorithm]
            if not runs:
                continue
            reached = [r["reached"] if r["reached"] is not None else math.inf for r in runs]
            hours = [r["gpu_hours_reached"] if r["reached"] is not None else math.inf
                     for r in runs]
            table.append({
                "family": family, "landscape": name, "searcher": algorithm, "seeds": len(runs),
                "median": statistics.median(reached), "p90": percentile(reached, 0.9),
                "gpu_hours_median": statistics.median(hours),
                "found": sum(r["reached"] is not None for r in runs),
                "found@40": sum(r["reached"] is not None and r["reached"] <= 40 for r in runs),
                **{f"regret@{n}": statistics.median(r["regret"][n] for r in runs) for n in (10, 20, 50)},
                "overhead_ms": 1e3 * statistics.mean(r["overhead_s"] for r in runs),
                "winner_ok": sum(r["winner_ok"] for r in runs),
                "trials_run": statistics.median(r["trials"] for r in runs),
            })
    return table


def fmt(value: float) -> str:
    if math.isinf(value):
        return "-"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def print_table(table: list[dict]) -> None:
    print("| landscape | searcher | trials to 3%: median | p90 | GPU-h to 3%: median | found "
          "| in 40 | regret@10 | @20 | @50 | overhead ms | trials run | winner ok |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in table:
        print(f"| {t['landscape']} | {t['searcher']} | {fmt(t['median'])} | {fmt(t['p90'])} | "
              f"{fmt(t['gpu_hours_median'])} | {t['found']}/{t['seeds']} | {t['found@40']} | "
              f"{t['regret@10']:.3f} | {t['regret@20']:.3f} | {t['regret@50']:.3f} | "
              f"{t['overhead_ms']:.1f} | {t['trials_run']:g} | {t['winner_ok']}/{t['seeds']} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0, help="held-out checks: e.g. 20")
    parser.add_argument("--searchers", default=",".join(SEARCHERS))
    parser.add_argument("--json", default=None)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--landscapes", default=",".join([*MEASURED, *LANDSCAPES]))
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--max-trials", type=int, default=MAX_TRIALS)
    parser.add_argument("--no-stop", action="store_true", help="cost-guided never stops itself")
    args = parser.parse_args()
    margin = 1.0 if args.no_stop else 0.0
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    pairs = [(name, algorithm) for name in args.landscapes.split(",")
             for algorithm in args.searchers.split(",")]
    skipped = sorted({name for name, algorithm in pairs
                      if algorithm == GENERATIVE_PRIOR and not perturbed_only(name)})
    if skipped:
        print(f"{GENERATIVE_PRIOR} skips {', '.join(skipped)}: it needs per-knob perturbations "
              "and no quirks")
    jobs = [(name, algorithm, seed, args.noise, args.max_trials, margin)
            for name, algorithm in pairs if not (algorithm == GENERATIVE_PRIOR and name in skipped)
            for seed in seeds]
    started = time.time()
    with Pool(args.processes) as pool:
        rows = pool.map(run_one, jobs, chunksize=4)
    table = summarize(rows)
    print(f"{len(jobs)} runs in {time.time() - started:.0f} s; up to {args.max_trials} trials "
          f"each, noise {args.noise:g}\n")
    for family, _ in FAMILIES:
        rows_of = [t for t in table if t["family"] == family and t["seeds"]]
        if rows_of:
            print(f"\n{family} landscapes\n")
            print_table(rows_of)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "table": table}, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
