"""`paratune plan` says when its order rests on a constant no measurement checks, and which peak
MFU is against: an open search for DeepSeek-V3 on 2,048 H800 prefers a smaller expert-parallel
group than the EP 64 DeepSeek ran by an overlap share (`overlap_expert_comm`) that is an
assumption; and its FP8 layouts' MFU is against the BF16 dense peak."""

from __future__ import annotations

import json

import pytest

from orchestrator.costmodel.unvalidated import UNVALIDATED

DEEPSEEK = "examples/deepseek-v3.yaml"
OPEN_EP = ["--set", "space.ep=[8,16,32,64]", "--top-k", "10"]  # the published EP 64 listed


def test_an_open_deepseek_plan_says_its_pick_rests_on_the_expert_overlap_constant(cli):
    code, out, err = cli("plan", DEEPSEEK, *OPEN_EP, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert [c["constant"] for c in plan["caveats"]] == ["overlap_expert_comm"]
    caveat = plan["caveats"][0]
    low, high = UNVALIDATED["overlap_expert_comm"]
    assert caveat["range"] == [low, high] and low <= caveat["value"] <= high
    # At one end of the range another listed layout comes first.
    assert set(caveat["first_at"].values()) != {1}
    published = [i for i, e in enumerate(plan["top"], 1) if e["config"]["ep"] == 64]
    assert published, "the published EP 64 layout is listed"
    # It trails the pick over the whole range, but by how much is the constant's: its gap is
    # among those the caveat says move.
    moved = {g["layout"]: g["behind_pick"] for g in caveat["gaps_moved"]}
    assert set(published) <= set(moved)
    for gap in (moved[i] for i in published):
        assert max(gap.values()) - min(gap.values()) > 0.05
    assert plan["mfu_peak"] == "bf16"

    code, text, _ = cli("plan", DEEPSEEK, *OPEN_EP)
    assert code == 0
    flat = " ".join(text.split())
    assert "rests on the unvalidated constant overlap_expert_comm (value 0.6" in flat
    assert f"#{published[0]}" in flat.split("move by more than 5%")[0].split("gaps to the pick of")[1]
    assert "MFU and HFU are against the BF16 dense peak" in flat


def test_no_caveat_where_the_constant_is_not_used(cli):
    """Without the trainer's dispatch overlap the constant prices nothing, so the same
    space's order does not rest on it."""
    no_overlap = ["--set", "trial.megatron.args=[--overlap-grad-reduce]"]
    code, out, err = cli("plan", DEEPSEEK, *OPEN_EP, *no_overlap, "--json")
    assert code == 0, err
    assert json.loads(out)["caveats"] == []
    code, text, _ = cli("plan", DEEPSEEK, *OPEN_EP, *no_overlap)
    assert "caveat" not in text


@pytest.mark.parametrize("precision,footnote", [("bf16", False), ("fp8-tensorwise", True)])
def test_the_mfu_peak_is_stated(cli, spec_file, precision, footnote):
    spec = spec_file(f"""
name: peak
model: llama-7b
cluster: h100-80g
scale: {{nodes: 1, global_batch_size: 64}}
space: {{tp: [1, 2], zero_stage: [1], precision: [{precision}]}}
""")
    code, out, err = cli("plan", spec, "--json")
    assert code == 0, err
    assert json.loads(out)["mfu_peak"] == "bf16"
    code, text, _ = cli("plan", spec)
    assert ("against the BF16 dense peak" in " ".join(text.split())) is footnote
    code, out, _ = cli("estimate", spec, "--set", "space.tp=[1]", "--json")
    assert code == 0 and json.loads(out)["mfu_peak"] == "bf16"


def test_a_v100_mfu_is_against_its_fp16_peak(cli):
    code, out, err = cli("plan", "--model", "llama-7b", "--cluster", "v100-32g", "--gpus", "16",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["mfu_peak"] == "fp16"


def test_the_published_layout_trailing_over_the_whole_range_still_gets_a_caveat(cli):
    """EP 16 against DeepSeek's EP 64 only: EP 64 is never first over the constant's range, so
    the order holds, but how far it trails the pick is the constant's to say."""
    code, out, err = cli("plan", DEEPSEEK, "--set", "space.ep=[16,64]", "--top-k", "10",
                         "--json")
    assert code == 0, err
    plan = json.loads(out)
    [caveat] = plan["caveats"]
    assert set(caveat["first_at"].values()) == {1}
    published = {i for i, e in enumerate(plan["top"], 1) if e["config"]["ep"] == 64}
    assert published and published <= {g["layout"] for g in caveat["gaps_moved"]}
    code, text, _ = cli("plan", DEEPSEEK, "--set", "space.ep=[16,64]", "--top-k", "10")
    assert "rest on the unvalidated constant overlap_expert_comm" in " ".join(text.split())
