"""Tune small, choose for large, on a MEASURED two-scale landscape: the built-in trainer's grid
run at 1 node and at 2 nodes of the emulated cluster (tests/cluster/start_cluster.sh: two
network namespaces, Slurm inside), with the link between the nodes shaped by `tc` to about a
tenth of the bandwidth a collective gets inside a node, as InfiniBand is to NVLink; then the two
tables replayed to a slice campaign (1-node slice trials, 2-node confirmations) and to a
cost-guided campaign at 2 nodes, over several seeds.

`measure` (root; takes the cluster tests' lock, so it waits for them and they for it):
  starts the cluster, prices a 16 MB gloo all-reduce between two ranks inside node1, shapes
  both nodes' link (a tbf token bucket on each namespace's ptc0, so each direction once) to a
  tenth of it, prices the all-reduce across the nodes, runs the grid REPEATS times at each
  scale (a grid campaign each, one trial at a time, the two scales alternating), writes
  benchmarks/landscapes/emulated-two-scale-{1,2}node.json after each campaign (the table
  format of measure_landscape.py, plus each trial's wall time), removes the shaping and stops
  the cluster. It starts no campaign it would not finish by --end-by.
`replay` (default; seconds): the campaigns on the two tables, written to
  docs/emulated_two_scale.json and the tables in docs/emulated_two_scale.md.

Run: .venv/bin/python benchmarks/emulated_two_scale.py measure [--repeats 2] [--end-by HH:MM]
     .venv/bin/python benchmarks/emulated_two_scale.py [replay] [--seeds 20]
"""

from __future__ import annotations

import argparse
import calendar
import fcntl
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measure_landscape  # noqa: E402
from tabulated import TabulatedLandscape  # noqa: E402

from orchestrator.backends.base import Backend, TrialRequest  # noqa: E402
from orchestrator.backends.simulated import SimulatedHandle  # noqa: E402
from orchestrator.record.budget import executed, gpu_hours  # noqa: E402
from orchestrator.record.campaign import CampaignView  # noqa: E402
from orchestrator.record.journal import TARGET  # noqa: E402
from orchestrator.scheduling.controller import Controller  # noqa: E402
from orchestrator.campaign_spec.loading import apply_override, spec_from_dict  # noqa: E402
from orchestrator.campaign_spec.yaml_input import load_yaml_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "tests" / "cluster"
STATE = Path("/tmp/paratune-cluster-two-scale")
LOCK = Path("/tmp/paratune-cluster.lock")  # tests/cluster_harness.py's: one cluster at a time
NODES = ("node1", "node2")
PROBE_MB = 16  # about the tiny model's fp32 gradients (4.2M parameters)
# NVLink 4 (H100 SXM) 450 GB/s each way per GPU against one InfiniBand NDR port (400 Gb/s,
# 50 GB/s) per GPU: 9x (NVIDIA H100 datasheet; DGX H100 user guide). The emulated link is a
# tenth of the in-node figure. Its latency is the veth's own: this kernel has no netem to add
# any (tbf and htb are the shapers it has).
INTER_NODE_SHARE = 0.1
QUEUE_MS = 100  # tbf's queue: packets wait up to this long rather than drop
WITHIN = 0.03
SPEC = "examples/quickstart.yaml"
TABLES = {nodes: ROOT / "benchmarks" / "landscapes" / f"emulated-two-scale-{nodes}node.json"
          for nodes in (1, 2)}
JSON_PATH = ROOT / "docs" / "emulated_two_scale.json"
MD_PATH = ROOT / "docs" / "emulated_two_scale.md"
SPACE = ["space.tp=[1]", "space.pp=[1]", "space.zero_stage=[0, 1, 2, 3]",
         "space.micro_batch_size=[1, 2, 4]", "space.activation_checkpointing=[none, full]"]
GLOBAL_BATCH_PER_NODE = 8  # 2 ranks a node: grad_accum_steps is the same at both scales
ON_THE_CLUSTER = ["backend.kind=slurm", "backend.time_limit_min=10", "backend.max_requeues=0",
                  "trial.env.OMP_NUM_THREADS=1", f"trial.env.PYTHONPATH={ROOT}",
                  "tracking.enabled=false"]


def scale_overrides(nodes: int) -> list[str]:
    return [f"scale.nodes={nodes}", "scale.gpus_per_node=2",
            f"scale.global_batch_size={GLOBAL_BATCH_PER_NODE * nodes}"]


# --- measure --------------------------------------------------------------------------------

def in_node(node: str, *command: str) -> list[str]:
    return ["ip", "netns", "exec", f"ptc-{node}", *command]


def probe(placement: tuple[str, str], port: int) -> dict:
    """A gloo all-reduce between two ranks placed on those nodes (the same node twice: inside
    it), over the address of the first (so inside a node it goes by the kernel's loopback)."""
    master = f"10.211.0.{NODES.index(placement[0]) + 1}"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "ptc0", "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen(in_node(node, sys.executable, __file__, "_probe_rank", str(rank),
                                      master, str(port)),
                              stdout=subprocess.PIPE, text=True, env=env)
             for rank, node in enumerate(placement)]
    try:
        out = ranks[0].communicate(timeout=300)[0]
        ranks[1].wait(timeout=60)
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.wait()
    return json.loads(out.strip().splitlines()[-1])


def probe_rank(rank: int, master: str, port: str) -> None:
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=120))
    tensor = torch.ones(PROBE_MB * 2**20 // 4)
    dist.all_reduce(tensor)  # connections made
    seconds = []
    for _ in range(8):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        seconds.append(time.perf_counter() - start)
    if rank == 0:  # two ranks: the bus bandwidth (nccl-tests) is the algorithm bandwidth
        median = statistics.median(seconds)
        print(json.dumps({"bytes": tensor.numel() * 4, "seconds": round(median, 5),
                          "gbytes_per_s": round(tensor.numel() * 4 / median / 1e9, 4)}))
    dist.destroy_process_group()


def shape(rate_bytes_per_s: float) -> list[str]:
    """A token bucket (tbf) on each node's ptc0: every packet between the nodes leaves through
    one of them once; a node's traffic to itself goes by loopback and is not shaped. The
    bucket holds a millisecond of the rate, and at least 128 KiB (a GSO packet)."""
    burst = max(int(rate_bytes_per_s / 1000), 128 * 1024)
    commands = [in_node(node, "tc", "qdisc", "add", "dev", "ptc0", "root", "tbf", "rate",
                        f"{int(rate_bytes_per_s * 8)}bit", "burst", str(burst), "latency",
                        f"{QUEUE_MS}ms") for node in NODES]
    for command in commands:
        subprocess.run(command, check=True)
    return [" ".join(c) for c in commands]


def unshape() -> list[str]:
    commands = [in_node(node, "tc", "qdisc", "del", "dev", "ptc0", "root") for node in NODES]
    for command in commands:
        subprocess.run(command, check=False)
    return [" ".join(c) for c in commands]


def grid_campaign(runs: Path, nodes: int, repeat: int, trial: list[str]) -> list[dict]:
    """One grid campaign at `nodes` nodes through the cluster's Slurm; its finished events,
    each with its trial's wall time from submission (the Slurm job's start-up included)."""
    name = f"two-scale-{nodes}node-r{repeat}"
    overrides = [*scale_overrides(nodes), *SPACE, "search.algorithm=grid",
                 "budget.max_trials=100", "budget.max_concurrent=1", *ON_THE_CLUSTER, *trial]
    command = [sys.executable, "-m", "orchestrator.cli", "run", SPEC, "--set", f"name={name}",
               *[a for s in overrides for a in ("--set", s)]]
    subprocess.run(command, cwd=ROOT, check=False,
                   env={**os.environ, "PARATUNE_RUNS_DIR": str(runs),
                        "SLURM_CONF": str(STATE / "slurm.conf")})
    journal = runs / name / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()] \
        if journal.exists() else []
    submitted = {e["trial_id"]: e["time"] for e in events if e["event"] == "submitted"}
    return [{**e, "duration_s": round(e["time"] - submitted[e["trial_id"]], 2)}
            for e in events if e["event"] == "finished"]


def table(campaigns: list[list[dict]]) -> list[dict]:
    """measure_landscape.py's rows, with each measurement's trial wall time."""
    rows = measure_landscape.table(campaigns)
    by_layout = {json.dumps(row["config"], sort_keys=True): row for row in rows}
    for finished in campaigns:
        for event in finished:
            by_layout[json.dumps(event["config"], sort_keys=True)].setdefault(
                "duration_s", []).append(event["duration_s"])
    return rows


def measure(args) -> None:
    if os.geteuid() != 0:
        sys.exit("measure: needs root (network namespaces, tc)")
    end_by = calendar.timegm(time.strptime(time.strftime("%Y-%m-%d ", time.gmtime())
                                           + args.end_by, "%Y-%m-%d %H:%M")) \
        if args.end_by else None
    trial = [f"trial.steps={args.steps}", f"trial.warmup_steps={args.warmup}",
             "trial.timeout_s=300"]
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = subprocess.run(["bash", str(CLUSTER / "start_cluster.sh"), str(STATE)],
                                 capture_output=True, text=True)
        if started.returncode != 0:
            sys.exit(f"measure: the cluster did not start: {started.stderr[-2000:]}")
        try:
            measure_on_cluster(args, trial, end_by)
        finally:
            print("removing:", unshape(), flush=True)
            subprocess.run(["bash", str(CLUSTER / "stop_cluster.sh"), str(STATE)])


def measure_on_cluster(args, trial: list[str], end_by: float | None) -> None:
    started = time.time()
    inside = [probe(("node1", "node1"), 29611 + i) for i in range(3)]
    across_unshaped = [probe(("node1", "node2"), 29621 + i) for i in range(3)]
    in_node_gbps = statistics.median(p["gbytes_per_s"] for p in inside)
    shaped = shape(in_node_gbps * 1e9 * INTER_NODE_SHARE)
    across = [probe(("node1", "node2"), 29631 + i) for i in range(3)]
    network = {
        "probe": f"gloo all-reduce of {PROBE_MB} MiB between 2 ranks, median of 8, 3 probes",
        "in_node_gbytes_per_s": [p["gbytes_per_s"] for p in inside],
        "across_unshaped_gbytes_per_s": [p["gbytes_per_s"] for p in across_unshaped],
        "across_shaped_gbytes_per_s": [p["gbytes_per_s"] for p in across],
        "inter_node_share": INTER_NODE_SHARE, "tc": shaped,
        "latency": "not added: this kernel has no netem (tbf and htb only); the veth's own",
        "tc_removed_with": [" ".join(in_node(n, "tc", "qdisc", "del", "dev", "ptc0", "root"))
                            for n in NODES],
        "source": "NVLink 4 450 GB/s per direction per H100 SXM vs one 400 Gb/s InfiniBand "
                  "NDR port (50 GB/s) per GPU: 9x (NVIDIA H100 datasheet, DGX H100 guide)"}
    print(json.dumps(network), flush=True)
    campaigns: dict[int, list[list[dict]]] = {1: [], 2: []}
    took: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as runs:
        for repeat in range(args.repeats):
            for nodes in (1, 2):
                if end_by and took.get(nodes) and time.time() + took[nodes] > end_by:
                    print(f"stopping: a {nodes}-node campaign would end after --end-by",
                          flush=True)
                    return
                begun = time.time()
                campaigns[nodes].append(grid_campaign(Path(runs), nodes, repeat, trial))
                took[nodes] = time.time() - begun
                write_table(nodes, campaigns[nodes], network, args, started)
                print(f"{nodes} node(s), repeat {repeat}: {took[nodes]:.0f} s", flush=True)


def write_table(nodes: int, campaigns: list[list[dict]], network: dict, args, started: float):
    overrides = [*scale_overrides(nodes), *SPACE, "search.algorithm=grid",
                 "budget.max_concurrent=1", *ON_THE_CLUSTER,
                 f"trial.steps={args.steps}", f"trial.warmup_steps={args.warmup}"]
    TABLES[nodes].write_text(json.dumps({
        "name": f"emulated-two-scale-{nodes}node",
        "what": f"the built-in trainer, tiny LLaMA, {2 * nodes} ranks (gloo), 2 a node, on "
                f"{nodes} node(s) of the emulated two-node cluster (network namespaces on one "
                "machine, Slurm), the link between the nodes shaped by tc",
        "command": f".venv/bin/python benchmarks/emulated_two_scale.py measure --repeats "
                   f"{args.repeats} --steps {args.steps} --warmup {args.warmup}"
                   + (f" --end-by {args.end_by}" if args.end_by else ""),
        "spec": SPEC, "overrides": overrides,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs shared by both nodes and by "
                   f"other work on the machine, Python {platform.python_version()}",
        "cluster": "tests/cluster/start_cluster.sh: namespaces ptc-node1/ptc-node2 on bridge "
                   "ptc-br0 (10.211.0.x), slurmd each, 2 CPUs each in slurm.conf",
        "network": network,
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "seconds": round(time.time() - started),
        "repeats": len(campaigns),
        "layouts": table(campaigns)}, indent=1) + "\n")


# --- replay ---------------------------------------------------------------------------------

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


BEGIN, END = "<!-- BEGIN emulated-two-scale -->", "<!-- END emulated-two-scale -->"


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
    head, _, rest = MD_PATH.read_text().partition(BEGIN)
    tail = rest.partition(END)[2]
    MD_PATH.write_text(f"{head}{BEGIN}\n{markdown(report)}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    m = sub.add_parser("measure")
    m.add_argument("--repeats", type=int, default=2)
    m.add_argument("--steps", type=int, default=8)
    m.add_argument("--warmup", type=int, default=2)
    m.add_argument("--end-by", help="UTC HH:MM: start no campaign that would end later")
    m.add_argument("--space", nargs="*", help="space overrides instead of the grid's")
    r = sub.add_parser("replay")
    r.add_argument("--seeds", type=int, default=20)
    probe_parser = sub.add_parser("_probe_rank")
    probe_parser.add_argument("rank", type=int)
    probe_parser.add_argument("master")
    probe_parser.add_argument("port")
    args = parser.parse_args()
    if args.command == "_probe_rank":
        probe_rank(args.rank, args.master, args.port)
    elif args.command == "measure":
        if args.space:
            SPACE[:] = args.space
        measure(args)
    else:
        replay(args if args.command else parser.parse_args(["replay"]))


if __name__ == "__main__":
    main()
