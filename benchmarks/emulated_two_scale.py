"""Tune small, choose for large, on a MEASURED two-scale landscape: the two tables
benchmarks/measure_emulated_two_scale.py measured (the built-in trainer's grid at 1 node and at
2 nodes of the emulated cluster, the link between the nodes shaped to about a tenth of the
in-node collective bandwidth) replayed to a slice campaign (1-node slice trials, 2-node
confirmations) and to a cost-guided campaign at 2 nodes, over several seeds.

`replay` (default; seconds): the campaigns on the two tables, written to
  docs/emulated_two_scale.json and the tables in docs/emulated_two_scale.md.
`measure` (root; 30 minutes and more): benchmarks/measure_emulated_two_scale.py, which says
  how, with the same options.

Run: .venv/bin/python benchmarks/emulated_two_scale.py [replay] [--seeds 20]
     .venv/bin/python benchmarks/emulated_two_scale.py measure [--repeats 2] [--end-by HH:MM]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measure_emulated_two_scale as measuring  # noqa: E402
from marked_block import write_marked_block  # noqa: E402
from measure_emulated_two_scale import ROOT, SPEC, TABLES, scale_overrides  # noqa: E402
from tabulated import TabulatedLandscape  # noqa: E402

from orchestrator.backends.base import Backend, TrialRequest  # noqa: E402
from orchestrator.backends.simulated import SimulatedHandle  # noqa: E402
from orchestrator.record.budget import executed, gpu_hours  # noqa: E402
from orchestrator.record.campaign import CampaignView  # noqa: E402
from orchestrator.record.journal import TARGET  # noqa: E402
from orchestrator.scheduling.controller import Controller  # noqa: E402
from orchestrator.campaign_spec.loading import apply_override, spec_from_dict  # noqa: E402
from orchestrator.campaign_spec.yaml_input import load_yaml_file  # noqa: E402

WITHIN = 0.03
JSON_PATH = ROOT / "docs" / "emulated_two_scale.json"
MD_PATH = ROOT / "docs" / "emulated_two_scale.md"


class ReplayBackend(Backend):
    """Answers a trial from the table of its scale (by world size), drawn as tabulated.py
    draws, with the measured wall time of the measurement drawn as its duration."""

    def __init__(self, tables: dict[int, TabulatedLandscape]):
        self.tables = tables

    def submit(self, request: TrialRequest) -> SimulatedHandle:
        landscape = self.tables[request.config.world_size]
        result = landscape.run(request.config, request.trial_id)
        row = landscape.rows[request.config]
        durations = [d for d, v, s in zip(row["duration_s"], row["tokens_per_s"], row["status"])
                     if s == "ok" and v]
        if result.ok:
            duration = durations[landscape.measured(request.config).index(result.tokens_per_s)]
        else:
            duration = statistics.mean(d for d in row["duration_s"] if d)
        result.extra = {**result.extra, "simulated_duration_s": duration}
        return SimulatedHandle(result)


def replay_spec(runs: Path, name: str, seed: int, confirm_gpu_hours: float, **scale) -> object:
    raw = load_yaml_file(ROOT / SPEC)
    measured_space = [o for o in json.loads(TABLES[2].read_text())["overrides"]
                      if o.startswith("space.")]
    for item in [*scale_overrides(2), *measured_space, "search.algorithm=cost-guided",
                 f"search.seed={seed}", "budget.max_trials=24", "budget.max_concurrent=1",
                 f"budget.confirm_gpu_hours={confirm_gpu_hours}", "tracking.enabled=false",
                 f"tracking.runs_dir={runs}", f"name={name}", "backend.kind=simulated"]:
        apply_override(raw, item)
    raw["scale"].update(scale)
    return spec_from_dict(raw)


def campaign(runs: Path, name: str, seed: int, confirm: float, **scale) -> tuple[list, object]:
    spec = replay_spec(runs, name, seed, confirm, **scale)
    tables = {2 * nodes: TabulatedLandscape(TABLES[nodes], seed) for nodes in (1, 2)}
    summary = Controller(spec, backend=ReplayBackend(tables)).run()
    return executed(CampaignView.open(runs, name).records()), summary


def one_seed(seed: int, truth: dict, confirm: float, runs: Path | None = None) -> dict:
    runs = runs or Path(tempfile.mkdtemp()) / "runs"
    best = max(truth.values())
    sliced, summary = campaign(runs, "sliced", seed, confirm, slice_nodes=1)
    at_target = [r for r in sliced if r.phase == TARGET]
    winner = summary.best.config if summary.best is not None and summary.best.phase == TARGET \
        else None
    full, _ = campaign(runs, "full", seed, confirm)
    spent, to_reach, trials_to_reach = 0.0, None, None
    for count, r in enumerate(sorted(full, key=lambda r: r.trial_id), 1):
        spent += gpu_hours(r)
        if to_reach is None and r.result and r.result.ok and truth.get(r.config, 0) >= \
                (1 - WITHIN) * best:
            to_reach, trials_to_reach = spent, count
    return {"seed": seed, "slice_trials": len(sliced) - len(at_target),
            "target_trials": len(at_target), "winner": winner.key() if winner else None,
            "gap": None if winner not in truth else round(1 - truth[winner] / best, 4),
            "slice_gpu_hours": round(sum(gpu_hours(r) for r in sliced), 4),
            "full_trials": len(full), "full_gpu_hours": round(spent, 4),
            "full_gpu_hours_to_3pct": None if to_reach is None else round(to_reach, 4),
            "full_trials_to_3pct": trials_to_reach}


def summarise(rows: list[dict]) -> dict:
    shares = [r["slice_gpu_hours"] / (r["full_gpu_hours_to_3pct"] or r["full_gpu_hours"])
              for r in rows]
    return {"seeds": len(rows),
            "winner_within_3pct": sum(r["gap"] is not None and r["gap"] <= WITHIN for r in rows),
            "full_reached_3pct": sum(r["full_gpu_hours_to_3pct"] is not None for r in rows),
            "median_gap": statistics.median(1.0 if r["gap"] is None else r["gap"] for r in rows),
            "median_slice_gpu_hours": round(statistics.median(r["slice_gpu_hours"]
                                                              for r in rows), 4),
            "median_full_gpu_hours_to_3pct": round(statistics.median(
                r["full_gpu_hours_to_3pct"] or r["full_gpu_hours"] for r in rows), 4),
            "full_reached_3pct_at_first_trial": sum(r["full_trials_to_3pct"] == 1
                                                    for r in rows),
            "median_full_gpu_hours": round(statistics.median(r["full_gpu_hours"]
                                                             for r in rows), 4),
            "median_share_of_full_total": round(statistics.median(
                r["slice_gpu_hours"] / r["full_gpu_hours"] for r in rows), 4),
            "median_share_of_full_to_3pct": round(statistics.median(shares), 4),
            "max_share_of_full_to_3pct": round(max(shares), 4),
            "seeds_meeting_target": sum(
                r["gap"] is not None and r["gap"] <= WITHIN and share <= 0.5
                for r, share in zip(rows, shares))}


def grid_rows() -> list[dict]:
    """Each layout's measurements at both scales: mean tokens/s, spread, and runs."""
    data = {nodes: json.loads(TABLES[nodes].read_text()) for nodes in (1, 2)}
    rows = []
    for nodes, table_data in data.items():
        landscape = TabulatedLandscape(TABLES[nodes], 0)
        for config in landscape.candidates:
            values = landscape.measured(config)
            row = landscape.rows[config]
            rows.append({"nodes": nodes, "layout": config.key(), "runs": len(values),
                         "failed": len(row["status"]) - len(values),
                         "tokens_per_s": round(statistics.mean(values)) if values else None,
                         "spread": round(statistics.stdev(values) / statistics.mean(values), 4)
                         if len(values) > 1 else None})
    return rows


def repeat_means(path: Path) -> list[int]:
    """Each repeat's mean tokens/s over the layouts it ran: what the machine's load did to
    the whole grid between repeats."""
    layouts = json.loads(path.read_text())["layouts"]
    return [round(statistics.mean(v for row in layouts if len(row["tokens_per_s"]) > i
                                  and (v := row["tokens_per_s"][i])))
            for i in range(max(len(row["tokens_per_s"]) for row in layouts))]


def label(nodes: int) -> str:
    return f"{nodes} node{'s' if nodes > 1 else ''}"


def replay(args) -> dict:
    two = TabulatedLandscape(TABLES[2], 0)
    truth = two.truth
    best_config = max(truth, key=truth.get)
    durations = [d for row in two.rows.values() for d, s in zip(row["duration_s"], row["status"])
                 if s == "ok" and d]
    # What the slice campaign may spend at the target: about four 2-node trials.
    confirm = round(4 * 4 * statistics.median(durations) / 3600, 4)
    rows = []
    for seed in range(args.seeds):
        rows.append(one_seed(seed, truth, confirm))
        print(json.dumps(rows[-1]), flush=True)
    one = TabulatedLandscape(TABLES[1], 0)
    report = {
        "tables": {label(nodes): f"benchmarks/landscapes/{path.name}"
                   for nodes, path in TABLES.items()},
        "network": json.loads(TABLES[2].read_text())["network"],
        "measurement": {label(nodes): {key: json.loads(path.read_text())[key] for key in (
            "measured_at", "seconds", "repeats", "command", "machine")}
            for nodes, path in TABLES.items()},
        "best_2node": {"layout": best_config.key(), "tokens_per_s": round(truth[best_config])},
        "best_1node": {"layout": max(one.truth, key=one.truth.get).key(),
                       "tokens_per_s": round(max(one.truth.values()))},
        "noise_1node": round(one.noise(), 4), "noise_2node": round(two.noise(), 4),
        "repeat_means": {label(nodes): repeat_means(path) for nodes, path in TABLES.items()},
        "confirm_gpu_hours": confirm, "grid": grid_rows(),
        "summary": summarise(rows), "seeds": rows}
    JSON_PATH.write_text(json.dumps(report, indent=1) + "\n")
    write_doc(report)
    print(json.dumps(report["summary"], indent=1))
    return report


def pct(value: float | None) -> str:
    return "none" if value is None else f"{100 * value:.1f}%"


def markdown(report: dict) -> str:
    """The grid at both scales, the per-seed campaigns and the summary, as the page shows."""
    net = report["network"]
    in_node = statistics.median(net["in_node_gbytes_per_s"])
    lines = [f"- Run-to-run noise (the median relative spread of a layout's repeats): "
             f"{pct(report['noise_1node'])} at 1 node, {pct(report['noise_2node'])} at 2 "
             "nodes. Each repeat's mean tokens/s over the grid: " + "; ".join(
                 f"{scale} {', '.join(f'{v:,}' for v in means)}"
                 for scale, means in report["repeat_means"].items()) + ".",
             f"- Network ({net['probe']}): inside a node {in_node:.2f} GB/s (median); across "
             f"the nodes {statistics.median(net['across_unshaped_gbytes_per_s']):.2f} GB/s "
             f"unshaped, {statistics.median(net['across_shaped_gbytes_per_s']):.3f} GB/s "
             f"shaped to {net['inter_node_share']:g} of the in-node figure by "
             + "; ".join(f"`{c}`" for c in net["tc"]) + f". Latency {net['latency']}.",
             f"- Source of the ratio: {net['source']}."]
    for scale, m in report["measurement"].items():
        lines.append(f"- {scale}: {m['repeats']} repeats of the grid from {m['measured_at']} "
                     f"({m['seconds']:,} s), `{m['command']}`; {m['machine']}.")
    lines += [f"- The slice campaign may spend {report['confirm_gpu_hours']:.4f} GPU-hours at "
              "the target (`budget.confirm_gpu_hours`: about four 2-node trials); both "
              "campaigns search cost-guided with at most 24 trials.", ""]
    lines += ["| nodes | layout | tokens/s (mean) | spread | runs ok | failed |",
             "|---|---|---|---|---|---|"]
    for g in sorted(report["grid"], key=lambda g: (g["nodes"], g["layout"])):
        lines.append(f"| {g['nodes']} | `{g['layout']}` | "
                     f"{'-' if g['tokens_per_s'] is None else format(g['tokens_per_s'], ',')} | "
                     f"{pct(g['spread'])} | {g['runs']} | {g['failed']} |")
    lines += ["", "| seed | slice trials | target trials | named layout | below the 2-node best | "
              "its GPU-hours | 2-node campaign's GPU-hours to 3% | share | 2-node campaign's "
              "trials | its GPU-hours in all |", "|---" * 10 + "|"]
    for r in report["seeds"]:
        to_3 = r["full_gpu_hours_to_3pct"]
        share = r["slice_gpu_hours"] / (to_3 or r["full_gpu_hours"])
        lines.append(f"| {r['seed']} | {r['slice_trials']} | {r['target_trials']} | "
                     f"`{r['winner']}` | {pct(r['gap'])} | {r['slice_gpu_hours']:.3f} | "
                     f"{'never' if to_3 is None else f'{to_3:.3f}'} | {pct(share)} | "
                     f"{r['full_trials']} | {r['full_gpu_hours']:.3f} |")
    s, best = report["summary"], report["best_2node"]
    lines += ["", f"- 2-node measured best: `{best['layout']}`, "
              f"{best['tokens_per_s']:,} tokens/s.",
              f"- Slice campaign's named layout within 3% of it: **{s['winner_within_3pct']} "
              f"of {s['seeds']}** seeds (median gap {pct(s['median_gap'])}).",
              f"- Slice campaign's GPU-hours: median {s['median_slice_gpu_hours']:.3f}; the "
              f"2-node cost-guided campaign's to first measure a layout within 3%: median "
              f"{s['median_full_gpu_hours_to_3pct']:.3f} (reached on "
              f"{s['full_reached_3pct']} of {s['seeds']}, at its first trial on "
              f"{s['full_reached_3pct_at_first_trial']}); share: median "
              f"{pct(s['median_share_of_full_to_3pct'])}, at most "
              f"{pct(s['max_share_of_full_to_3pct'])}.",
              f"- Each campaign run to its own end (cost-guided's own stop, at most 24 "
              f"trials): the 2-node campaign spends median "
              f"{s['median_full_gpu_hours']:.3f} GPU-hours; the slice campaign's share of "
              f"that: median {pct(s['median_share_of_full_total'])}.",
              f"- Seeds meeting the target (within 3% and at most 50% of the GPU-hours): "
              f"**{s['seeds_meeting_target']} of {s['seeds']}**."]
    return "\n".join(lines) + "\n"


def write_doc(report: dict) -> None:
    write_marked_block(MD_PATH, "emulated-two-scale", markdown(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    measuring.add_measure_arguments(sub.add_parser(
        "measure", help="the two tables, on the emulated cluster (root): "
                        "benchmarks/measure_emulated_two_scale.py"))
    r = sub.add_parser("replay")
    r.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    if args.command == "measure":
        measuring.measure(args)
    else:
        replay(args if args.command else parser.parse_args(["replay"]))


if __name__ == "__main__":
    main()
