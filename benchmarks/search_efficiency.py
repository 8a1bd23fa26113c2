"""How many measured trials and GPU-hours each searcher needs, on landscapes with known optima,
in three families reported apart, each landscape labelled "measured" or "generated (shaped like
the model)".

Measured here: recorded sweeps no cost model wrote (benchmarks/landscapes/, replayed by
benchmarks/tabulated.py): each trial answers with one of the layout's recorded measurements,
so the noise is the table's own (`--noise 0` replays their means).

Measured, published: every source of benchmarks/measured/ with 3 layouts or more of one model
on one cluster at one GPU count (benchmarks/corpus_landscapes.py), replayed as `space.kind:
list` over exactly the measured layouts, each trial answering with the published figure
(`--noise` does not apply).

On measured landscapes a layout is pruned, free, as the controller prunes it (beyond the memory
margin or one the cluster cannot run: LiveCostModel.infeasible); a risky layout is measured.

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
MAX_TRIALS), the GPU-hours spent until then (median), regret after 10/20/50 trials, search
overhead (ask + tell) per trial, how often the named winner (the layout with the best mean over
its measurements, repeats included) is within 3% of the true best ("winner ok"), and how often
a run ended more than 3% off while a layout it would not prune was still untried ("stranded").
A trial's GPU-hours are its world size x TRIAL_STEPS x its step time: the measured one on a
measured landscape, the simulated backend's on a generated one; a failed trial counts none.
Per searcher, over the landscapes of a family: the median of the landscapes' median trials and
GPU-hours to 3%, and the share of all seeds naming a winner within 3%.

Run: .venv/bin/python benchmarks/search_efficiency.py [--seeds 20] [--json out.json]
     [--noise 0.05]                                      measurement noise (default 3%)
     [--first-seed 20]                                   seeds 20.. instead of 0..
     [--max-trials 300 --no-stop --searchers cost-guided]  overhead at 300 trials
     [--searchers cost-guided,generative-prior]          beside the reference told the prior
                                                         of a perturbed landscape
     [--landscapes @published --table-json docs/search_measured.json]  a family (@here,
                                                         @published, @generated); its tables as
                                                         JSON (tests/benchmarks/test_benchmarks_doc.py)
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

from corpus_landscapes import corpus_landscapes
from generative_prior import NAME as GENERATIVE_PRIOR
from structure_oracle import NAME as STRUCTURE_ORACLE
from structure_oracle import StructureOracle
from generative_prior import generative_prior_searcher
from landscapes_moe_cp import LONG_CONTEXT_LANDSCAPES, MOE_LANDSCAPES
from tabulated import TabulatedLandscape

from orchestrator.backends.simulated import SimulatedBackend
from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.scheduling.live_cost_model import LiveCostModel
from orchestrator.search import make_searcher
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for

ROOT = Path(__file__).resolve().parents[1]
MAX_TRIALS = 60
WITHIN = 0.03
TRIAL_STEPS = 12  # warm-up and timed steps a trial runs, for its GPU-hours
SEARCHERS = ("random", "grid", "deephyper-cbo", "optuna", "hyperopt", "cost-guided")
# Run only when named, on the landscapes whose structure they are told: generative_prior.py,
# structure_oracle.py.
REFERENCES = (GENERATIVE_PRIOR, STRUCTURE_ORACLE)
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
PUBLISHED = dict.fromkeys(corpus_landscapes())  # benchmarks/corpus_landscapes.py
MEASURED_KIND, GENERATED_KIND = "measured", "generated (shaped like the model)"
# (family, its `--landscapes @key`, its landscapes, their label in the tables)
FAMILIES = (("measured", "here", MEASURED, MEASURED_KIND),
            ("measured, published", "published", PUBLISHED, MEASURED_KIND),
            ("cost model", "generated", LANDSCAPES, GENERATED_KIND))


def kind(name: str) -> str:
    return GENERATED_KIND if name in LANDSCAPES else MEASURED_KIND


def landscape(name: str, seed: int, noise: float = 0.03):
    if name in MEASURED:
        table = TabulatedLandscape(ROOT / MEASURED[name], seed, noisy=noise != 0)
        return table.candidates, table.cost, table, table.truth
    if name in PUBLISHED:
        published = corpus_landscapes()[name]
        return published.candidates, published.cost, published, published.truth
    path, overrides, perturbation, interactions = LANDSCAPES[name]
    spec = load_spec(path, overrides)
    cost = cost_model_for(spec)
    candidates = spec.search_space().candidates()
    sim = SimulatedBackend(cost, noise=noise, perturbation=perturbation, seed=seed,
                           interactions=interactions,
                           parallel_quirks=getattr(spec.backend, "parallel_quirks", 0.0))
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


def parallel_quirks_only(name: str) -> bool:
    """A cost-model landscape whose truth departs from the model by the parallel quirks alone:
    the one kind whose structure structure_oracle.py is told."""
    return (name in LANDSCAPES and LANDSCAPES[name][2:] == (0.0, 0.0)
            and any(o.startswith("backend.parallel_quirks=") for o in LANDSCAPES[name][1]))


def pruning(name: str, cost):
    """Whether the controller skips a layout unmeasured. Measured landscapes: its own rule (a
    risky layout is measured). Generated ones keep the rule their published figures ran under
    (only a layout the model fits is measured)."""
    if kind(name) == MEASURED_KIND:
        live = LiveCostModel(cost, [])
        return lambda config: live.infeasible(config) is not None
    return lambda config: not cost.estimate(config).fits


def run_one(args: tuple) -> dict:
    name, algorithm, seed, noise, max_trials, stop_margin = args
    candidates, cost, sim, truth = landscape(name, seed, noise)
    objective, pruned = Objective(), pruning(name, cost)
    best = max(truth.values())
    if algorithm == GENERATIVE_PRIOR:
        searcher = generative_prior_searcher(*LANDSCAPES[name][2:], candidates, objective,
                                             seed=seed, cost_model=cost, stop_margin=stop_margin)
    elif algorithm == STRUCTURE_ORACLE:
        searcher = StructureOracle(candidates, cost, objective, seed=seed, noise=noise,
                                   strength=sim.parallel_quirks)
    else:
        searcher = make_searcher(algorithm, candidates, objective, seed=seed, cost_model=cost,
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
        if pruned(config):  # by the controller: free
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
            measured.setdefault(config, []).append(math.log(objective.value(result)))
        if reached is None and best_so_far >= (1 - WITHIN) * best:
            reached, hours_reached = trials, gpu_hours
        for n in (10, 20, 50):
            if trials == n:
                regret[n] = 1 - best_so_far / best
    for n in (10, 20, 50):  # stopped early: its regret stays where it stopped
        regret.setdefault(n, 1 - best_so_far / best)
    winner = max(measured, key=lambda c: statistics.mean(measured[c]), default=None)
    winner_ok = winner is not None and truth[winner] >= (1 - WITHIN) * best
    untried = [c for c in candidates if c not in measured and c in truth and not pruned(c)]
    return {"landscape": name, "searcher": algorithm, "seed": seed, "reached": reached,
            "gpu_hours_reached": hours_reached,
            "trials": trials, "regret": regret, "overhead_s": statistics.mean(overhead),
            "winner_ok": winner_ok, "stranded": not winner_ok and bool(untried),
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
    for family, _, names, label in FAMILIES:
        for name, algorithm in ((n, a) for n in names for a in SEARCHERS + REFERENCES):
            runs = [r for r in rows if r["landscape"] == name and r["searcher"] == algorithm]
            if not runs:
                continue
            reached = [r["reached"] if r["reached"] is not None else math.inf for r in runs]
            hours = [r["gpu_hours_reached"] if r["reached"] is not None else math.inf
                     for r in runs]
            table.append({
                "family": family, "kind": label, "landscape": name, "searcher": algorithm,
                "seeds": len(runs),
                "median": statistics.median(reached), "p90": percentile(reached, 0.9),
                "gpu_hours_median": statistics.median(hours),
                "found": sum(r["reached"] is not None for r in runs),
                "found@40": sum(r["reached"] is not None and r["reached"] <= 40 for r in runs),
                **{f"regret@{n}": statistics.median(r["regret"][n] for r in runs) for n in (10, 20, 50)},
                "overhead_ms": 1e3 * statistics.mean(r["overhead_s"] for r in runs),
                "winner_ok": sum(r["winner_ok"] for r in runs),
                "stranded": sum(r["stranded"] for r in runs),
                "trials_run": statistics.median(r["trials"] for r in runs),
            })
    return table


def by_searcher(table: list[dict]) -> list[dict]:
    """Per family and searcher, over its landscapes: the median of their median trials and
    GPU-hours to 3% (a landscape never reached counts as infinite), the seeds naming a winner
    within 3% and those stranded, of all seeds run."""
    summary = []
    for family, *_ in FAMILIES:
        for algorithm in SEARCHERS + REFERENCES:
            entries = [t for t in table if t["family"] == family and t["searcher"] == algorithm]
            if not entries:
                continue
            summary.append({
                "family": family, "kind": entries[0]["kind"], "searcher": algorithm,
                "landscapes": len(entries), "seeds": sum(t["seeds"] for t in entries),
                "median": statistics.median(t["median"] for t in entries),
                "gpu_hours_median": statistics.median(t["gpu_hours_median"] for t in entries),
                "winner_ok": sum(t["winner_ok"] for t in entries),
                "winner_ok_19": sum(t["winner_ok"] >= 0.95 * t["seeds"] for t in entries),
                "stranded": sum(t["stranded"] for t in entries),
            })
    return summary


def fmt(value: float) -> str:
    if math.isinf(value):
        return "-"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


TABLE_HEADER = ("| landscape | searcher | trials to 3%: median | p90 | GPU-h to 3%: median "
                "| found | in 40 | regret@10 | @20 | @50 | overhead ms | trials run "
                "| winner ok | stranded | kind |")
SUMMARY_HEADER = ("| searcher | landscapes | trials to 3%: median of medians "
                  "| GPU-h to 3%: median of medians | winner ok (seeds) "
                  "| landscapes with winner ok ≥ 95% | stranded (seeds) | kind |")


def table_line(t: dict) -> str:
    return (f"| {t['landscape']} | {t['searcher']} | {fmt(t['median'])} | {fmt(t['p90'])} | "
            f"{fmt(t['gpu_hours_median'])} | {t['found']}/{t['seeds']} | {t['found@40']} | "
            f"{t['regret@10']:.3f} | {t['regret@20']:.3f} | {t['regret@50']:.3f} | "
            f"{t['overhead_ms']:.1f} | {t['trials_run']:g} | {t['winner_ok']}/{t['seeds']} | "
            f"{t['stranded']} | {t['kind']} |")


def summary_line(t: dict) -> str:
    return (f"| {t['searcher']} | {t['landscapes']} | {fmt(t['median'])} | "
            f"{fmt(t['gpu_hours_median'])} | {t['winner_ok']}/{t['seeds']} | "
            f"{t['winner_ok_19']}/{t['landscapes']} | {t['stranded']} | {t['kind']} |")


def print_table(table: list[dict]) -> None:
    print(TABLE_HEADER)
    print("|---" * TABLE_HEADER.count(" | ") + "|---|")
    for t in table:
        print(table_line(t))


def print_summary(summary: list[dict]) -> None:
    print(SUMMARY_HEADER)
    print("|---" * SUMMARY_HEADER.count(" | ") + "|---|")
    for t in summary:
        print(summary_line(t))


def landscape_names(text: str) -> list[str]:
    """`--landscapes`: names, or `@key` for a whole family."""
    keys = {key: list(names) for _, key, names, _ in FAMILIES}
    names = []
    for token in text.split(","):
        if token.startswith("@") and token[1:] not in keys:
            sys.exit(f"--landscapes: no family {token!r}; use one of "
                     + ", ".join(f"@{k}" for k in keys))
        names += keys[token[1:]] if token.startswith("@") else [token]
    return names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0, help="held-out checks: e.g. 20")
    parser.add_argument("--searchers", default=",".join(SEARCHERS))
    parser.add_argument("--json", default=None)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--landscapes", default="@here,@published,@generated")
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--max-trials", type=int, default=MAX_TRIALS)
    parser.add_argument("--no-stop", action="store_true", help="cost-guided never stops itself")
    parser.add_argument("--table-json", default=None,
                        help="the tables (no per-run rows), as docs/search_measured.json")
    args = parser.parse_args()
    margin = 1.0 if args.no_stop else 0.0
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    pairs = [(name, algorithm) for name in landscape_names(args.landscapes)
             for algorithm in args.searchers.split(",")]
    told = {GENERATIVE_PRIOR: (perturbed_only, "per-knob perturbations and no quirks"),
            STRUCTURE_ORACLE: (parallel_quirks_only, "parallel quirks alone")}
    skipped = {(name, algorithm) for name, algorithm in pairs
               if algorithm in told and not told[algorithm][0](name)}
    for reference, (_, needs) in told.items():
        names = sorted(name for name, algorithm in skipped if algorithm == reference)
        if names:
            print(f"{reference} skips {', '.join(names)}: it needs {needs}")
    jobs = [(name, algorithm, seed, args.noise, args.max_trials, margin)
            for name, algorithm in pairs if (name, algorithm) not in skipped
            for seed in seeds]
    started = time.time()
    with Pool(args.processes) as pool:
        rows = pool.map(run_one, jobs, chunksize=4)
    table = summarize(rows)
    summary = by_searcher(table)
    print(f"{len(jobs)} runs in {time.time() - started:.0f} s; up to {args.max_trials} trials "
          f"each, noise {args.noise:g}\n")
    for family, *_ in FAMILIES:
        rows_of = [t for t in table if t["family"] == family and t["seeds"]]
        if rows_of:
            print(f"\n{family} landscapes\n")
            print_table(rows_of)
            print(f"\n{family} landscapes, per searcher\n")
            print_summary([t for t in summary if t["family"] == family])
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "table": table}, fh, indent=1, default=str)
    if args.table_json:
        settings = {"seeds": [seeds.start, seeds.stop], "noise": args.noise,
                    "max_trials": args.max_trials, "no_stop": args.no_stop,
                    "searchers": args.searchers.split(",")}
        with open(args.table_json, "w") as fh:
            json.dump({"settings": settings, "table": table, "by_searcher": summary}, fh,
                      indent=1, default=str)
            fh.write("\n")


if __name__ == "__main__":
    main()
