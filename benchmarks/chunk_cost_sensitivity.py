"""Which published AMSP figures the cost model reproduces at each NCCL chunk cost.

`msg_half_bytes` was chosen against the AMSP paper (orchestrator/presets/clusters.py): the
figures whose outcome changes over the values tried are the ones it is fitted to
(orchestrator/costmodel/constants_provenance.py). This re-runs the paper tests
(tests/costmodel/test_costmodel_papers.py and tests/costmodel/test_published_setups.py, their own published
figures and bounds, fits included) with the A800 preset's chunk cost set to each value, and
prints which pass. A strict xfail that
passes counts as a reproduced figure; one that stays failing as a miss.

Run: .venv/bin/python benchmarks/chunk_cost_sensitivity.py [--chunks 0,8192,16384,32768,65536]
     (about 10 s per value; results in docs/costmodel.md)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ["tests/costmodel/test_costmodel_papers.py", "tests/costmodel/test_published_setups.py"]


class Outcomes:
    """A pytest plugin that records, per test, whether its published figure was reproduced."""

    def __init__(self) -> None:
        self.reproduced: dict[str, bool] = {}

    def pytest_runtest_logreport(self, report) -> None:
        if report.when != "call" and not (report.when == "setup" and report.failed):
            return
        name = report.nodeid.split("::", 1)[1]
        expected_miss = hasattr(report, "wasxfail")  # xfail that failed: still a miss
        xpassed = report.failed and "XPASS" in str(report.longrepr)
        self.reproduced[name] = (report.passed and not expected_miss) or xpassed


def run_one(chunk: float) -> dict[str, bool]:
    """In this process: the checks with the A800 preset's chunk cost replaced."""
    import pytest

    from orchestrator.presets import CLUSTER_PRESETS

    CLUSTER_PRESETS["a800-80g"] = CLUSTER_PRESETS["a800-80g"].model_copy(
        update={"msg_half_bytes": chunk})
    outcomes = Outcomes()
    pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=",
                 *(str(ROOT / c) for c in CHECKS)], plugins=[outcomes])
    return outcomes.reproduced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="0,8192,16384,32768,65536")
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(run_one(args.one)))
        return
    table: dict[float, dict[str, bool]] = {}
    for chunk in (float(c) for c in args.chunks.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(chunk)], cwd=ROOT,
                             capture_output=True, text=True, check=False).stdout
        (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        table[chunk] = json.loads(line.removeprefix("RESULT "))
    names = sorted({n for results in table.values() for n in results})
    for chunk, results in table.items():
        missed = [n for n in names if not results.get(n, False)]
        print(f"chunk {chunk / 1024:g} KB: {len(names) - len(missed)} of {len(names)} checks pass")
        for name in missed:
            print(f"    missed: {name}")


if __name__ == "__main__":
    main()
