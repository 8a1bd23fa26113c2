"""The search benchmark's structure oracle (benchmarks/structure_oracle.py): told how a
parallel-quirks landscape was drawn, its posterior over the hidden parameters moves to the
seed's truth as measurements come in, and it proposes each layout once."""

from __future__ import annotations

import sys

import numpy as np
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from search_efficiency import landscape  # noqa: E402
from structure_oracle import StructureOracle  # noqa: E402

from orchestrator.backends.parallel_quirks import HiddenParameters  # noqa: E402
from orchestrator.common.objective import Objective  # noqa: E402


def test_measurements_move_the_posterior_to_the_seeds_truth():
    candidates, cost, sim, truth = landscape("deepseek-v3-parallel-quirks", seed=5, noise=0.0)
    oracle = StructureOracle(candidates, cost, Objective(), seed=0, noise=0.01, draws=1000)
    hidden = HiddenParameters.draw(5)
    spans = np.array(HiddenParameters.prior(1000, seed=0).dispatch_span)
    # layouts whose expert group crosses either span: they tell the two spans apart
    wide = [c for c in truth if c.ep * (c.etp or 1) >= 32][:6]
    for config in wide:
        oracle.tell(config, sim.run(config, "t"))
    weights = np.exp(oracle._log_weight - oracle._log_weight.max())
    on_truth = weights[spans == hidden.dispatch_span].sum() / weights.sum()
    assert on_truth > 0.95 and (spans == hidden.dispatch_span).mean() < 0.7


def test_it_proposes_each_layout_once():
    candidates, cost, _, _ = landscape("llama3-405b-32k-parallel-quirks", seed=0, noise=0.0)
    oracle = StructureOracle(candidates, cost, Objective(), seed=0, noise=0.03, draws=200)
    asked = [c for _ in range(40) for c in oracle.ask(1)]
    assert len(asked) == len(set(asked)) == 40
