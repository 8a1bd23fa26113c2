"""Controller + searcher + journal + MLflow overhead per trial, on a 1,000-trial simulated
campaign (target: <= 50 ms per trial, <= 60 s for the campaign).

Run: .venv/bin/python benchmarks/controller_overhead.py [--trials 1000] [--searcher random]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from orchestrator.scheduling.controller import Controller
from orchestrator.campaign_spec import spec_from_dict

# LLaMA-7B on 512 H100s: 4,356 layouts, 4,147 of which fit, so nearly every trial runs.
SPACE = {
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "zero_stage": [0, 1, 2, 3],
    "micro_batch_size": [1, 2, 4, 8], "activation_checkpointing": ["none", "selective", "full"],
    "sequence_parallel": [False, True], "pp_schedule": ["1f1b", "interleaved", "gpipe"],
    "virtual_stages": [1, 2, 4],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--searcher", default="random")
    parser.add_argument("--no-mlflow", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = spec_from_dict({
            "name": "overhead", "model": "llama-7b", "cluster": "h100-80g",
            "scale": {"nodes": 64, "global_batch_size": 2048}, "space": SPACE,
            "search": {"algorithm": args.searcher}, "backend": {"kind": "simulated"},
            "budget": {"max_trials": args.trials, "max_concurrent": 8},
            "tracking": {"runs_dir": str(Path(tmp) / "runs"), "enabled": not args.no_mlflow},
        })
        controller = Controller(spec)
        start = time.perf_counter()
        summary = controller.run()
        elapsed = time.perf_counter() - start
        counts = summary.counts()
        executed = sum(v for k, v in counts.items() if k != "infeasible")
        print(f"{executed} trials run and {counts.get('infeasible', 0)} pruned as infeasible "
              f"({len(summary.records)} journal entries, MLflow {'off' if args.no_mlflow else 'on'})")
        print(f"wall {elapsed:.1f} s: {1e3 * elapsed / executed:.1f} ms per trial run, "
              f"{1e3 * elapsed / len(summary.records):.1f} ms per journal entry")


if __name__ == "__main__":
    main()
