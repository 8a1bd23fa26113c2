"""`paratune estimate` and `plan` from options: every option given applies, with a SPEC file
or without one, and a world size spreads over the cluster's whole nodes."""

from __future__ import annotations

import pytest
from builders import cli_json
from conftest import EXAMPLES

QUICKSTART = str(EXAMPLES / "quickstart.yaml")


def test_a_world_of_many_nodes_is_laid_out_on_whole_nodes(cli):
    data = cli_json(cli, "estimate", "--model", "llama-7b", "--cluster", "a100-80g", "--gpus",
                    "2048")
    assert data["world_size"] == 2048 and data["config"]["dp"] == 2048
    plan = cli_json(cli, "plan", "--model", "llama-7b", "--cluster", "a100-80g", "--gpus", "3072")
    assert plan["world_size"] == 3072
    code, _, err = cli("estimate", "--model", "llama-7b", "--cluster", "a100-80g",
                       "--gpus", "2050")
    assert code == 2 and err.count("\n") == 1
    assert "--gpus: 2050 is not whole nodes of 8" in err


def test_layout_and_preset_options_apply_to_a_spec_file(cli):
    pinned = cli_json(cli, "estimate", QUICKSTART, "--tp", "2", "--zero-stage", "0",
                      "--micro-batch-size", "2", "--pp", "1", "--activation-checkpointing", "none")
    assert pinned["chosen"] == "pinned"
    assert (pinned["config"]["tp"], pinned["config"]["micro_batch_size"]) == (2, 2)
    longer = cli_json(cli, "estimate", QUICKSTART, "--seq-len", "512", "--tp", "1", "--zero-stage",
                      "0", "--micro-batch-size", "1", "--pp", "1", "--activation-checkpointing",
                      "none")
    shorter = cli_json(cli, "estimate", QUICKSTART, "--tp", "1", "--zero-stage", "0",
                       "--micro-batch-size", "1", "--pp", "1", "--activation-checkpointing", "none")
    assert longer["time"]["compute_s"] > shorter["time"]["compute_s"]
    partial = cli_json(cli, "estimate", QUICKSTART, "--set",
                       "space.activation_checkpointing=[full]", "--recompute-num-layers", "1",
                       "--tp", "1", "--zero-stage", "0", "--micro-batch-size", "1", "--pp", "1")
    assert partial["config"]["recompute_num_layers"] == 1
    code, _, err = cli("estimate", QUICKSTART, "--model", "llama-7b")
    assert code == 2 and "fits in 8 GB" in err  # the 7B model, not the spec's tiny one
    code, _, err = cli("estimate", QUICKSTART, "--gpus", "4")
    assert code == 2 and "--gpus: with a SPEC file the world size is its scale" in err


def test_set_applies_without_a_spec_file(cli):
    base = ("estimate", "--model", "tiny", "--cluster", "cpu-local", "--gpus", "2")
    short, long = (cli_json(cli, *base, "--set", f"model.seq_len={n}") for n in (128, 2048))
    assert long["time"]["compute_s"] > short["time"]["compute_s"]
    code, _, err = cli(*base, "--set", "bogus.key=1")
    assert code == 2 and "bogus: unknown key" in err


@pytest.mark.parametrize("args,message", [
    (["--seq-len", "0"], "model.seq_len: Input should be greater than 0"),
    (["--cluster", "no-such"], "--cluster: unknown cluster preset 'no-such'"),
])
def test_option_values_out_of_range_are_one_line(cli, args, message):
    base = {"--model": "tiny", "--cluster": "cpu-local", "--gpus": "2"}
    base.update(zip(args[::2], args[1::2]))
    code, _, err = cli("estimate", *[x for pair in base.items() for x in pair])
    assert code == 2 and message in err and err.count("\n") == 1, err
