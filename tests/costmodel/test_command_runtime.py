"""`trial.runtime`: a `command` program's code is not seen, so the spec says which engine it
runs, and the cost model prices its layouts as that engine's trainer does; without the key it
is priced as before (DeepSpeed's ZeRO, PyTorch's DDP), and `plan` and the report say which
runtime priced the trials."""

from __future__ import annotations

import json

import pytest
import yaml

from dashboards.report import render
from dashboards.report_data import report_data
from orchestrator.costmodel import CostModel
from orchestrator.record.campaign import CampaignView
from orchestrator.campaign_spec import spec_from_dict
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates

COMMAND = ["./train.sh", "--tp", "{tp}", "--pp", "{pp}", "--zero", "{zero_stage}",
           "--mbs", "{micro_batch_size}", "--gas", "{grad_accum_steps}"]
# One layout whose DDP reduction (zero_stage 0, dp 8) Megatron-LM does not hide behind the
# backward by default, where the default runtime (PyTorch's DDP) does.
LAYOUT = {"tp": [2], "pp": [1], "zero_stage": [0], "micro_batch_size": [1],
          "activation_checkpointing": ["full"]}


def spec_data(trial: dict, space: dict = LAYOUT, **extra) -> dict:
    return {"name": "runtime", "model": "llama-7b", "cluster": "h100-80g",
            "scale": {"nodes": 2, "global_batch_size": 64}, "space": space,
            "trial": trial, **extra}


def priced_layout(trial: dict, space: dict = LAYOUT):
    """The cost model's estimate of the spec's one layout, as a campaign prices it."""
    spec = spec_from_dict(spec_data(trial, space), source="test")
    [config] = fitted_candidates(spec)
    return cost_model_for(spec).estimate(config)


def same_pricing(a, b) -> None:
    assert a.config == b.config
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.memory.as_gb() == pytest.approx(b.memory.as_gb(), rel=1e-12)


def test_a_command_with_runtime_megatron_is_priced_as_the_megatron_lm_trainer():
    command = priced_layout({"command": COMMAND, "runtime": "megatron"})
    megatron = priced_layout({"trainer": "megatron-lm"})
    same_pricing(command, megatron)
    # Not the default's price: the key changed what the model assumed.
    default = priced_layout({"command": COMMAND})
    assert command.step_time_s != pytest.approx(default.step_time_s, rel=1e-6)


# (runtime, the trainer it names, that trainer's section, a layout where the engines differ)
ZERO3 = {**LAYOUT, "tp": [1], "zero_stage": [3]}
RUNTIMES = [
    ("pytorch", {"trainer": "builtin"}, ZERO3),
    ("torchtitan", {"trainer": "torchtitan"}, ZERO3),
    ("deepspeed", {"trainer": "deepspeed", "deepspeed": {"script": "train.py"}}, LAYOUT),
    ("megatron", {"trainer": "megatron-lm"}, LAYOUT),
]


@pytest.mark.parametrize("runtime,trainer,space", RUNTIMES, ids=[r[0] for r in RUNTIMES])
def test_each_runtime_is_priced_as_its_trainer(runtime, trainer, space):
    command = priced_layout({"command": COMMAND, "runtime": runtime}, space)
    same_pricing(command, priced_layout(trainer, space))
    default = priced_layout({"command": COMMAND}, space)
    assert (command.step_time_s, command.memory.as_gb()) != (default.step_time_s,
                                                            default.memory.as_gb())


@pytest.mark.parametrize("space", [LAYOUT, ZERO3], ids=["ddp", "zero3"])
def test_without_the_key_a_command_is_priced_as_before(space):
    """The default is the cost model's own: DeepSpeed's ZeRO stages, PyTorch's DDP."""
    spec = spec_from_dict(spec_data({"command": COMMAND}, space), source="test")
    assert spec.trial.runtime is None
    [config] = fitted_candidates(spec)
    stock = CostModel(spec.model, spec.cluster, spec.gpus_per_node, spec.trial.flash_attention)
    same_pricing(cost_model_for(spec).estimate(config), stock.estimate(config))


def write(tmp_path, data: dict) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_an_unknown_runtime_is_one_line_naming_the_field_and_the_values(tmp_path, cli):
    code, out, err = cli("plan", write(tmp_path, spec_data({"command": COMMAND,
                                                            "runtime": "megatorn"})))
    lines = (out + err).strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "trial.runtime" in lines[0] and "megatorn" in lines[0]
    named = lines[0].partition("choose one of ")[2].split(", ")
    assert set(named) == {"pytorch", "torchtitan", "deepspeed", "megatron"}


def test_a_runtime_for_a_trainer_of_its_own_is_one_line(tmp_path, cli):
    code, out, err = cli("plan", write(tmp_path, spec_data({"trainer": "megatron-lm",
                                                            "runtime": "deepspeed"})))
    lines = (out + err).strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "trial.runtime" in lines[0] and "megatron-lm" in lines[0]


@pytest.mark.parametrize("trial,named", [
    ({"command": COMMAND, "runtime": "megatron"}, ["megatron", "trial.runtime"]),
    ({"command": COMMAND}, ["DeepSpeed", "default", "trial.runtime"]),
    ({"trainer": "megatron-lm"}, ["megatron-lm", "trial.trainer"]),
], ids=["runtime", "default", "trainer"])
def test_plan_names_the_runtime_that_priced_the_layouts(tmp_path, cli, trial, named):
    path = write(tmp_path, spec_data(trial))
    code, out, err = cli("plan", path, "--json")
    assert code == 0, err
    runtime = json.loads(out)["runtime"]
    assert all(word in runtime for word in named), runtime
    if "command" in trial:  # the table says it too, where the engine is the user's word
        code, out, err = cli("plan", path)
        assert code == 0 and f"priced as: {runtime}" in " ".join(out.split()), out


def test_the_report_names_the_runtime_that_priced_the_trials(tmp_path, runs_dir, cli):
    data = spec_data({"command": COMMAND, "runtime": "megatron"},
                     {**LAYOUT, "micro_batch_size": [1, 2]},
                     search={"algorithm": "grid"}, budget={"max_trials": 2},
                     backend={"kind": "simulated", "seed": 3}, tracking={"enabled": False})
    code, _, err = cli("run", write(tmp_path, data))
    assert code == 0, err
    page = render(report_data(CampaignView.open(runs_dir, "runtime")))
    assert "Priced by the cost model as megatron (trial.runtime)" in page
