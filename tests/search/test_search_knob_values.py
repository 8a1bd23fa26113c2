"""Every searcher proposes precision, offload, overlap and bucket values: nullable booleans and
sizes are categories the peers' own spaces take, and each proposal is a layout the campaign
holds."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from orchestrator.common.objective import Objective
from orchestrator.result import TrialResult
from orchestrator.search import make_searcher
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates

SPACE = ["space.kind=megatron-3d", "space.zero_stage=[1]", "space.overlap_comm=[null, true, false]",
         "space.bucket_size=[null, 50000000]", "space.offload=[none, optimizer]",
         "trial.trainer=megatron-lm", "trial.megatron={script: pretrain_gpt.py}"]


@pytest.mark.parametrize("algorithm", ["random", "grid", "optuna", "hyperopt", "deephyper-cbo",
                                       "cost-guided"])
def test_each_searcher_proposes_the_new_knobs_values_from_the_campaigns_layouts(algorithm):
    spec = load_spec(EXAMPLES / "amsp-llama-7b.yaml", [f"search.algorithm={algorithm}", *SPACE])
    candidates = fitted_candidates(spec)
    searcher = make_searcher(algorithm, candidates, Objective(), seed=0,
                             cost_model=cost_model_for(spec))
    proposed = []
    for step in range(len(candidates)):
        batch = searcher.ask(1)
        if not batch:
            break
        proposed += batch
        searcher.tell(batch[0], TrialResult(status="ok", tokens_per_s=1000.0 + step,
                                            world_size=batch[0].world_size))
    assert proposed and set(proposed) <= set(candidates)
    assert len({(c.overlap_comm, c.bucket_size, c.offload) for c in proposed}) >= 3
