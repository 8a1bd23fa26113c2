"""Measure the grid at two scales of the emulated cluster: the built-in trainer's grid run at 1
node and at 2 nodes of tests/cluster/start_cluster.sh's cluster (two network namespaces, Slurm
inside), with the link between the nodes shaped by `tc` to about a tenth of the bandwidth a
collective gets inside a node, as InfiniBand is to NVLink. The tables it writes are what
benchmarks/emulated_two_scale.py replays into docs/emulated_two_scale.md.

Needs root, and takes the cluster tests' lock (so it waits for them and they for it). It
starts the cluster, prices a 16 MB gloo all-reduce between two ranks inside node1, shapes both
nodes' link (a tbf token bucket on each namespace's ptc0, so each direction once) to a tenth of
it, prices the all-reduce across the nodes, runs the grid REPEATS times at each scale (a grid
campaign each, one trial at a time, the two scales alternating), writes
benchmarks/landscapes/emulated-two-scale-{1,2}node.json after each campaign (the table format
of measure_landscape.py, plus each trial's wall time), removes the shaping and stops the
cluster. It starts no campaign it would not finish by --end-by.

Run: .venv/bin/python benchmarks/measure_emulated_two_scale.py [--repeats 2] [--end-by HH:MM]
     (the same as `benchmarks/emulated_two_scale.py measure`, the command the tables so far
     record)
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

import measure_landscape  # noqa: E402

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
SPEC = "examples/quickstart.yaml"
TABLES = {nodes: ROOT / "benchmarks" / "landscapes" / f"emulated-two-scale-{nodes}node.json"
          for nodes in (1, 2)}
SPACE = ["space.tp=[1]", "space.pp=[1]", "space.zero_stage=[0, 1, 2, 3]",
         "space.micro_batch_size=[1, 2, 4]", "space.activation_checkpointing=[none, full]"]
GLOBAL_BATCH_PER_NODE = 8  # 2 ranks a node: grad_accum_steps is the same at both scales
ON_THE_CLUSTER = ["backend.kind=slurm", "backend.time_limit_min=10", "backend.max_requeues=0",
                  "trial.env.OMP_NUM_THREADS=1", f"trial.env.PYTHONPATH={ROOT}",
                  "tracking.enabled=false"]


def scale_overrides(nodes: int) -> list[str]:
    return [f"scale.nodes={nodes}", "scale.gpus_per_node=2",
            f"scale.global_batch_size={GLOBAL_BATCH_PER_NODE * nodes}"]


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
    if args.space:
        SPACE[:] = args.space
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
        "command": f".venv/bin/python benchmarks/measure_emulated_two_scale.py --repeats "
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


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    """The measurement's options, here and under `benchmarks/emulated_two_scale.py measure`."""
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--end-by", help="UTC HH:MM: start no campaign that would end later")
    parser.add_argument("--space", nargs="*", help="space overrides instead of the grid's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_measure_arguments(parser)
    sub = parser.add_subparsers(dest="command")
    probe_parser = sub.add_parser("_probe_rank")  # one rank of probe(), started by it
    probe_parser.add_argument("rank", type=int)
    probe_parser.add_argument("master")
    probe_parser.add_argument("port")
    args = parser.parse_args()
    if args.command == "_probe_rank":
        probe_rank(args.rank, args.master, args.port)
    else:
        measure(args)


if __name__ == "__main__":
    main()
