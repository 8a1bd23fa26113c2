"""How fast the cost model is: one estimate, and enumerating + estimating a 10,000-config space.

Targets: one estimate <= 1 ms; a 10,000-configuration space enumerated and estimated <= 5 s.
Run: .venv/bin/python benchmarks/costmodel_speed.py   (results go in docs/benchmarks.md)
"""

from __future__ import annotations

import platform
import statistics
import time

from orchestrator.campaign_spec import spec_from_dict
from orchestrator.campaign_spec.planning import cost_model_for

SPACE = {
    "tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8, 16], "zero_stage": [0, 1, 2, 3],
    "micro_batch_size": [1, 2, 4, 8, 16, 32], "activation_checkpointing": ["none", "selective", "full"],
    "sequence_parallel": [False, True], "pp_schedule": ["1f1b", "interleaved", "gpipe"],
    "virtual_stages": [1, 2, 4, 5],
}


def main() -> None:
    spec = spec_from_dict({
        "name": "speed", "model": "llama-70b", "cluster": "h100-80g",
        "scale": {"nodes": 128, "global_batch_size": 4096}, "space": SPACE,
    })
    cost = cost_model_for(spec)

    start = time.perf_counter()
    candidates = spec.search_space().candidates()
    enumerated = time.perf_counter()
    estimates = [cost.estimate(c) for c in candidates]
    done = time.perf_counter()

    single = []
    for config in candidates[:2000]:
        t0 = time.perf_counter()
        cost.estimate(config)
        single.append(time.perf_counter() - t0)

    fitting = sum(e.fits for e in estimates)
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"space: llama-70b on 1,024 H100s, {len(candidates):,} valid configs ({fitting:,} fit)")
    print(f"enumerate: {enumerated - start:.2f} s; estimate all: {done - enumerated:.2f} s; "
          f"total {done - start:.2f} s (target <= 5 s)")
    print(f"one estimate: median {statistics.median(single) * 1e3:.3f} ms, "
          f"max {max(single) * 1e3:.3f} ms over {len(single)} configs (target <= 1 ms)")


if __name__ == "__main__":
    main()
