"""The trial job checks a layout through the layout schema's rules (the ones the spec and the
search space apply), so a layout breaking a declared rule is refused with the schema's reason,
not a second wording of the job's own."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

TINY = {"num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
        "seq_len": 36}

BROKEN = [
    ({"zero_stage": 5}, 1, "zero_stage(5) must be one of 0, 1, 2, 3"),
    ({"sequence_parallel": True}, 1, "sequence_parallel needs tp > 1"),
    ({"pp": 2, "virtual_stages": 2}, 2, "virtual_stages(2) > 1 needs pp_schedule 'interleaved'"),
    ({"dp": 2, "offload": "optimizer+params", "zero_stage": 1}, 2,
     "offload 'optimizer+params' needs zero_stage 3 (zero_stage 1): weights live on the host "
     "only when sharded (DeepSpeed's offload_param, FSDP2's CPU offload)"),
    ({"dp": 2, "ep": 4, "etp": 1}, 2, "ep(4) x etp(1) must divide tp(1) x dp(2), the ranks of "
     "a pipeline stage the experts are laid out on"),
    # A rule that sees the model: 36 tokens do not split into 2 x cp = 8 chunks.
    ({"cp": 4}, 4, "cp(4) splits a sequence into 2 x cp = 8 chunks: 2 x cp must divide "
     "seq_len(36)"),
    ({"cp": 3, "cp_comm_type": "a2a"}, 3, "cp(3) with cp_comm_type a2a (Ulysses) splits heads "
     "over cp: cp(3) must divide the 4 heads of a tp(1) rank; use p2p or allgather"),
]


@pytest.mark.parametrize("settings,world,reason", BROKEN)
def test_a_job_breaking_a_declared_rule_gets_the_layout_schemas_reason(settings, world, reason):
    from jobs.config import JobConfig
    from jobs.model import ModelArgs
    from jobs.trainer import Infeasible, check_feasible

    config = JobConfig(model=ModelArgs(**TINY), **settings)
    with pytest.raises(Infeasible) as refused:
        check_feasible(config, world)
    assert str(refused.value) == reason


@pytest.mark.parametrize("settings,world,reason", BROKEN)
def test_the_jobs_reason_is_the_one_the_spec_and_the_space_give(settings, world, reason):
    """One path of rules: the job's JobConfig and the space's knob values get the same first
    reason from the layout schema."""
    from jobs.config import JobConfig
    from jobs.model import ModelArgs
    from orchestrator.layout import knobs, layout_problems

    config = JobConfig(model=ModelArgs(**TINY), **settings)
    values = {k.name: getattr(config, k.name) for k in knobs()}
    assert config.layout_problem() == layout_problems(values, config.model)[0] == reason


def test_the_job_counts_its_sizes_through_the_layout_object():
    from jobs.config import JobConfig
    from jobs.layout import MESH_DIMS, data_parallel_plan, expert_mesh_shape, mesh_shape

    config = JobConfig(tp=2, pp=3, cp=2, dp=4, zero_stage=3)
    assert (config.dims.world, config.dims.gradient_group) == (48, 8)
    assert dict(zip(MESH_DIMS, mesh_shape(config, data_parallel_plan(config)))) == {
        "pp": 3, "dp_replicate": 1, "dp_shard": 4, "cp": 2, "tp": 2}
    experts = JobConfig(tp=2, dp=4, ep=4, etp=1)
    assert expert_mesh_shape(experts) == (1, 2, 4, 1)  # 2 x 4 stage ranks over ep 4, etp 1
