"""`paratune plan --model M --cluster C --gpus N`: the whole space the model and the cluster
allow, said as searched and left out; no trainer's refusals without a trainer; a token budget's
days and GPU-hours; errors that name the `--set` that widens a space; a pipeline depth no split
of the space takes is a note while other depths remain; a spec's problems come together."""

from __future__ import annotations

import pytest
from builders import cli_json

from orchestrator.cli.plan_tokens import parse_tokens, time_to_train
from orchestrator.common.errors import SpecError, UserError
from orchestrator.campaign_spec import load_spec

GPT3 = ("plan", "--model", "gpt-175b", "--cluster", "frontier", "--gpus", "1024")
DEEPSEEK = ("plan", "--model", "deepseek-v3-671b", "--cluster", "h800-80g", "--gpus", "2048",
            "--set", "space.ep=[64]", "--set", "space.tp=[1,2]", "--set", "space.pp=[16]")
FRONTIER_175B_MFU = 0.3614  # Dash et al., arXiv 2312.12705: 175B on 1,024 MI250X GCDs


def test_the_whole_space_is_searched_and_said(cli):
    data = cli_json(cli, *GPT3)
    searched = data["full_space"]["searched"]
    assert searched["tp"] == [1, 2, 4, 8] and searched["pp"] == [1, 2, 4, 8, 16, 32]
    assert searched["zero_stage"] == [0, 1, 2, 3]
    assert searched["activation_checkpointing"] == ["none", "selective", "full"]
    assert searched["micro_batch_size"][:3] == [1, 2, 4] and searched["precision"] == ["bf16"]
    assert searched["pp_schedule"] == ["1f1b", "interleaved"]
    assert (data["best"]["config"]["tp"], data["best"]["config"]["pp"]) != (1, 1)
    assert abs(data["mfu"] - FRONTIER_175B_MFU) < 0.05
    left_out = " ".join(data["full_space"]["left_out"])
    assert "offload" in left_out and "AMSP" in left_out and "no FP8" in left_out
    code, text, err = cli(*GPT3)
    flat = " ".join(text.split())
    assert code == 0, err
    assert "searched the whole space" in flat and "tp: 1, 2, 4, 8" in flat
    assert "left out:" in flat and "MFU vs 191.5 TFLOPS BF16 dense peak" in flat
    assert cli_json(cli, *GPT3, "--amsp", "--top-k", "1")["planner"] == "amsp"


def test_without_a_trainer_no_trainer_refuses_a_layout(cli):
    data = cli_json(cli, *DEEPSEEK, "--top-k", "1")
    assert data["best"]["config"]["pp"] == 16  # 61 layers: first and last stages smaller
    assert data["best"]["config"]["pipeline_split"] == "first_last"
    assert data["full_space"]["trainer"] is None and data["full_space"]["refused"] == []
    code, _, err = cli(*DEEPSEEK, "--set", "space.pp=[16,32]", "--top-k", "1")
    assert code == 0 and "note: space.pp: 32 is in no layout of this space" in err, err
    code, _, err = cli(*DEEPSEEK, "--set", "trial.trainer=builtin")
    assert code == 2 and "model.moe_router_num_groups: the built-in trainer" in err
    code, text, err = cli(*DEEPSEEK, "--set", "trial.trainer=megatron-lm")
    assert code == 0, err
    flat = " ".join(text.split())
    assert "trainer megatron-lm narrows space.zero_stage: megatron-lm has no ZeRO stage 3" in flat
    narrowed = cli_json(cli, *DEEPSEEK, "--set", "trial.trainer=megatron-lm")
    assert narrowed["full_space"]["searched"]["zero_stage"] == [0, 1]


def test_a_token_budget_gives_days_and_gpu_hours():
    assert parse_tokens("15T") == 15e12 and parse_tokens("300B") == 300e9
    assert parse_tokens("1e12") == 1e12 and parse_tokens("2.5M") == 2.5e6
    # 15T tokens at 1M tokens/s: 15e6 s = 4,166.67 h = 173.61 days; on 1,000 GPUs 4.17M GPU-h
    found = time_to_train(15e12, 1e6, 1000)
    assert found["days"] == pytest.approx(173.611, rel=1e-5)
    assert found["gpu_hours"] == pytest.approx(4_166_667, rel=1e-6)
    with pytest.raises(UserError, match="--tokens: 'lots' is not a token count"):
        parse_tokens("lots")


def test_plan_prints_the_budget_for_each_listed_layout(cli):
    data = cli_json(cli, *GPT3, "--tokens", "300B", "--top-k", "2")
    first = data["time_to_train"][0]
    tokens_per_s = data["top"][0]["tokens_per_s"]
    assert first["days"] == pytest.approx(300e9 / tokens_per_s / 86_400)
    assert first["gpu_hours"] == pytest.approx(300e9 / tokens_per_s / 3600 * 1024)
    code, text, _ = cli(*GPT3, "--tokens", "300B", "--top-k", "2")
    assert code == 0 and "time to train on 300B tokens:" in text and "#2: " in text


def test_nothing_fits_names_the_set_that_widens_the_space(cli):
    code, _, err = cli("plan", "--model", "llama-3.1-70b", "--cluster", "h100-80g", "--gpus",
                       "8", "--set", "model.seq_len=131072")
    assert code == 2 and "no configuration fits in 80 GB" in err
    assert "--set 'space.offload=[none,optimizer,optimizer+params]'" in err
    assert "more GPUs (--gpus)" in err


SIXTY_ONE = """\
name: sixty-one
model: {{preset: llama-7b, num_layers: 61}}
cluster: h100-80g
scale: {{nodes: 1, global_batch_size: 16}}
space: {{tp: [1], pp: {pp}, pipeline_split: [even], zero_stage: {zero}}}
{trial}"""


def test_a_depth_no_listed_split_takes_is_a_note_naming_the_split_that_would(cli, spec_file):
    path = spec_file(SIXTY_ONE.format(pp="[1, 4]", zero="[1]", trial=""))
    code, out, err = cli("plan", path)
    assert code == 0, err
    assert ("note: space.pp: 4 is in no layout of this space: pp=4 does not divide "
            "model.num_layers=61; use one of 1, 61, or set space.pipeline_split to "
            "[first_last]") in " ".join(err.split())


def test_a_specs_problems_come_in_one_error(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SIXTY_ONE.format(pp="[4]", zero="[3]",
                                     trial="trial: {trainer: megatron-lm}\n"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    lines = str(caught.value).splitlines()
    assert len(lines) == 2, lines
    assert "space.pp: pp=4 does not divide model.num_layers=61" in lines[0]
    assert "space.zero_stage: megatron-lm has no ZeRO stage 3" in lines[1]


def test_field_problems_of_several_sections_come_in_one_error(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SIXTY_ONE.format(pp="[1]", zero="[1]", trial=""))
    with pytest.raises(SpecError) as caught:
        load_spec(path, ["space.micro_batch_size=[0]", "budget.max_trials=-1"])
    lines = str(caught.value).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{path}: space.micro_batch_size: ")
    assert lines[1].startswith(f"{path}: budget.max_trials: Input should be greater than 0")


def test_estimate_names_the_peak_its_mfu_is_against(cli):
    code, text, err = cli("estimate", "--model", "llama-7b", "--cluster", "h100-80g", "--gpus",
                          "64", "--zero-stage", "3")
    assert code == 0, err
    assert "(MFU vs 989 TFLOPS BF16 dense peak)" in " ".join(text.split())
