"""A controller-like driver for the two-node Ray tests, run in a process of its own so each
test attaches anew (inside node1 for `address: auto`, from this machine for `ray://`):
  ray_trial.py ADDRESS run DIR [FAULT]  a world-size-4 built-in trial on RayBackend (2 ranks
      a node) in DIR/trial; prints its result as JSON. (Not the trial folder itself: a cancel
      ends every process whose command line names it.) FAULT `hang:S`: the trial hangs, and is
      cancelled S seconds after its last rank started.
  ray_trial.py ADDRESS actors              the named actors left in Ray namespace paratune.
The Ray environment ($STATE/ray.env: token auth, Ray temp root) comes from the caller."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(TESTS)]

import ray  # noqa: E402
from cluster_harness import TINY  # noqa: E402
from conftest import builtin_request  # noqa: E402

from orchestrator.backends.ray import RayBackend  # noqa: E402
from orchestrator.space import Layout  # noqa: E402

BATCH = {"micro_batch_size": 2, "grad_accum_steps": 2}  # x dp=4: a global batch of 16


def run_ray_trial(address: str, folder: Path, fault: str = "") -> dict:
    env = {"OMP_NUM_THREADS": "1", **({"PARATUNE_INJECT_FAULT": "hang"} if fault else {})}
    request = builtin_request(folder, folder.name, {"model": TINY, "dp": 4, **BATCH, "steps": 2,
                                                    "warmup_steps": 1},
                              timeout_s=240, env=env, config=Layout(dp=4, **BATCH))
    began = time.time()
    backend = RayBackend(address=address, ranks_per_node=2)
    connect_s = time.time() - began
    handle = backend.submit(request)
    start, deadline = time.time(), time.time() + 240
    if fault:
        ranks = [folder / f"rank{r}.log" for r in (1, 2, 3)]  # every rank started, any order
        while time.time() < deadline and not all(log.exists() for log in ranks):
            time.sleep(0.2)
        time.sleep(float(fault.split(":")[1]))
        handle.cancel()
    while (result := handle.poll()) is None and time.time() < deadline:
        time.sleep(0.2)
    return {"result": result.to_dict() if result else None, "seconds": time.time() - start,
            "connect_s": connect_s,
            "nodes": sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]),
            "info": handle.info()}


if __name__ == "__main__":
    address, command = sys.argv[1], sys.argv[2]
    if command == "run":
        out = run_ray_trial(address, Path(sys.argv[3]) / "trial", *sys.argv[4:5])
    else:
        RayBackend(address=address)
        out = {"actors": [a for a in ray.util.list_named_actors(all_namespaces=True)
                          if a["namespace"] == "paratune"]}
    print(json.dumps(out))
