"""Layout checks itself like torchtitan's ParallelDims; the space yields only valid ones."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT

from orchestrator.space import InvalidConfig, Layout, SearchSpace, SpaceRanges
from orchestrator.campaign_spec import load_spec

SHAPE = dict(world_size=8, num_heads=4, num_layers=4, global_batch_size=16)


def test_world_size_error_names_every_factor():
    with pytest.raises(InvalidConfig, match=r"tp\(2\) \* pp\(2\) \* dp\(1\) = 4 != WORLD_SIZE\(8\)"):
        Layout(tp=2, pp=2, dp=1, grad_accum_steps=16).validate(**SHAPE)


def test_tp_must_divide_heads():
    with pytest.raises(InvalidConfig, match=r"tp\(8\) does not divide num_heads\(4\)"):
        Layout(tp=8, dp=1, grad_accum_steps=16).validate(**SHAPE)


def test_pp_must_divide_layers():
    with pytest.raises(InvalidConfig, match=r"pp\(8\) does not divide num_layers\(4\)"):
        Layout(pp=8, grad_accum_steps=16).validate(**SHAPE)


def test_batch_product_must_match():
    with pytest.raises(InvalidConfig, match=r"micro_batch_size\(4\) \* grad_accum_steps\(1\) \* dp\(8\) = 32 != GLOBAL_BATCH\(16\)"):
        Layout(dp=8, micro_batch_size=4).validate(**SHAPE)


def test_field_types_checked_on_creation():
    with pytest.raises(InvalidConfig, match="zero_stage"):
        Layout(zero_stage=5)
    with pytest.raises(InvalidConfig, match="activation_checkpointing"):
        Layout(activation_checkpointing="some")


def test_space_enumerates_only_valid_configs():
    spec = load_spec(EXAMPLES / "quickstart.yaml", [
        "scale.gpus_per_node=4", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch_size=[1,2,3,4]"
    ])
    space = spec.search_space()
    candidates = space.candidates()
    assert candidates and len(set(candidates)) == len(candidates)
    for c in candidates:
        c.validate(world_size=4, num_heads=4, num_layers=4, global_batch_size=8)
        assert not (c.zero_stage > 0 and c.dp == 1)
    assert {c.tp for c in candidates} == {1, 2, 4}
    assert 3 not in {c.micro_batch_size for c in candidates}  # 3 * dp never divides 8
    # tp=4, pp=2 exceeds world 4: absent
    assert not [c for c in candidates if c.tp * c.pp > 4]


def test_config_round_trips_through_dict():
    c = Layout(tp=2, dp=4, zero_stage=3, micro_batch_size=2, grad_accum_steps=2,
                       activation_checkpointing="full")
    assert Layout.from_dict(c.to_dict()) == c
    assert c.key() == "tp2-pp1-dp4-z3-mbs2-gas2-acfull"


def test_space_takes_plain_ranges_without_a_spec():
    ranges = SpaceRanges(tp=(1, 2), zero_stage=(0, 3), micro_batch_size=(1,),
                         activation_checkpointing=("none",))
    space = SearchSpace(ranges=ranges, world_size=4, gpus_per_node=4, num_heads=4, num_layers=4,
                        global_batch_size=8)
    candidates = space.candidates()
    assert {(c.tp, c.zero_stage) for c in candidates} == {(1, 0), (1, 3), (2, 0), (2, 3)}
    spec = load_spec(EXAMPLES / "quickstart.yaml", ["scale.gpus_per_node=4", "space.tp=[2,1]"])
    assert spec.search_space().ranges.tp == (1, 2)  # the spec sorts its ranges


def test_ranges_reject_an_unknown_kind_and_empty_ranges():
    with pytest.raises(ValueError, match="space kind 'grid' is unknown"):
        SpaceRanges(kind="grid")
    with pytest.raises(ValueError, match="space range tp is empty"):
        SpaceRanges(tp=())


def test_search_spaces_import_nothing_of_the_spec():
    code = ("import sys, orchestrator.space; "
            "print([m for m in sys.modules if m.startswith('orchestrator.campaign_spec')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
