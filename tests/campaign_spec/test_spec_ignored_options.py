"""No option is accepted silently: an option that could do nothing is refused, one a saved spec
or an example may carry harmlessly is warned about, a feature ParaTune does not have yet is
named as such, and a `trial.command` campaign does not multiply trials by a knob its command
never sees."""

from __future__ import annotations

import logging

import pytest
import yaml
from builders import quickstart_data
from conftest import EXAMPLES, run_cli_process

from orchestrator.common.errors import SpecError
from orchestrator.campaign_spec import load_spec, spec_from_dict
from orchestrator.campaign_spec import notices
from orchestrator.campaign_spec.unsupported import NOT_SUPPORTED_YET

QUICKSTART = EXAMPLES / "quickstart.yaml"


@pytest.fixture(autouse=True)
def fresh_warnings():
    """Each test hears every warning, though the spec says each once per process."""
    notices.forget()
    yield
    notices.forget()


def spec_warnings(caplog, data: dict, saved: bool = False) -> tuple[object, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="orchestrator.campaign_spec"):
        spec = spec_from_dict(data, source="s.yaml", saved=saved)
    return spec, [r.getMessage() for r in caplog.records if r.name == "orchestrator.campaign_spec"]


# --- (a) options that were accepted and ignored ------------------------------------------------


@pytest.mark.parametrize("algorithm", ["grid", "random", "optuna"])
def test_stop_margin_is_refused_for_searchers_that_never_read_it(algorithm):
    data = quickstart_data(search={"algorithm": algorithm, "stop_margin": 0.05})
    with pytest.raises(SpecError) as err:
        spec_from_dict(data, source="s.yaml")
    line = str(err.value)
    assert line.startswith("s.yaml: search.stop_margin: ") and "\n" not in line
    assert algorithm in line and "cost-guided" in line and "remove stop_margin" in line


def test_stop_margin_stays_with_cost_guided_a_zero_margin_and_a_saved_spec():
    assert spec_from_dict(quickstart_data(search={"algorithm": "cost-guided", "stop_margin": 0.05}))
    assert spec_from_dict(quickstart_data(search={"algorithm": "grid", "stop_margin": 0.0}))
    saved = spec_from_dict(quickstart_data(search={"algorithm": "grid", "stop_margin": 0.05}),
                           saved=True)
    assert saved.search.stop_margin == 0.05


def test_ray_num_cpus_is_refused_with_an_address():
    data = quickstart_data(backend={"kind": "ray", "address": "auto", "num_cpus": 8})
    with pytest.raises(SpecError) as err:
        spec_from_dict(data, source="s.yaml")
    line = str(err.value)
    assert line.startswith("s.yaml: backend.num_cpus: ") and "\n" not in line
    assert "address" in line and "remove num_cpus" in line
    assert spec_from_dict(quickstart_data(backend={"kind": "ray", "num_cpus": 8})).backend.num_cpus == 8
    assert spec_from_dict(quickstart_data(backend={"kind": "ray", "address": "auto"}))
    assert spec_from_dict(data, saved=True).backend.num_cpus == 8


def test_flash_attention_off_is_a_warned_cost_model_assumption_where_the_trainer_ignores_it(
        caplog):
    spec, said = spec_warnings(caplog, quickstart_data(trial={"flash_attention": False}))
    assert spec.trial.flash_attention is False  # still priced as asked
    assert len(said) == 1 and said[0].startswith("trial.flash_attention: ")
    assert "cost model" in said[0] and "SDPA" in said[0] and "\n" not in said[0]


@pytest.mark.parametrize("sections", [
    {"trial": {"flash_attention": True}},  # the default: what every trainer is priced as
    {"trial": {"flash_attention": False}, "backend": {"kind": "simulated"}},  # no trainer runs
    {"trial": {"flash_attention": False, "trainer": "megatron-lm"}, "space": {"zero_stage": [0, 1]}},
])
def test_flash_attention_is_quiet_where_it_is_followed_or_moot(caplog, sections):
    _, said = spec_warnings(caplog, quickstart_data(**sections))
    assert said == []


def test_flash_attention_is_quiet_for_a_saved_spec(caplog):
    _, said = spec_warnings(caplog, quickstart_data(trial={"flash_attention": False}), saved=True)
    assert said == []


def test_every_example_still_loads():
    for path in sorted(EXAMPLES.glob("*.yaml")):
        assert load_spec(path).name


# --- (b) features not modelled yet -------------------------------------------------------------


@pytest.mark.parametrize("override, key, feature", [
    ("space.nvfp4=[true]", "space.nvfp4", "FP4"),
    ("trial.fp4_recipe=nvfp4", "trial.fp4_recipe", "FP4"),
    ("space.tp_comm_overlap=[true]", "space.tp_comm_overlap", "tensor-parallel communication"),
    ("space.pipeline_model_parallel_layout=[Et]", "space.pipeline_model_parallel_layout",
     "pipeline stages of any layer count"),
])
def test_a_feature_not_modelled_yet_is_named_not_called_a_typo(override, key, feature):
    with pytest.raises(SpecError) as err:
        load_spec(QUICKSTART, [override])
    line = str(err.value)
    assert f"{QUICKSTART}: {key}: " in line and feature in line
    assert "not supported yet" in line and "remove the key" in line
    assert "unknown key" not in line and "\n" not in line


@pytest.mark.parametrize("override, key, ours", [
    ("space.fp8_recipe=[delayed]", "space.fp8_recipe", "precision"),
    ("trial.precision=fp8", "trial.precision", "precision, a space knob"),
    ("space.offload_optimizer=[true]", "space.offload_optimizer", "offload"),
    ("space.reduce_bucket_size=[5e8]", "space.reduce_bucket_size", "bucket_size"),
    ("space.overlap_grad_reduce=[true]", "space.overlap_grad_reduce", "overlap_comm"),
    ("space.decoder_first_pipeline_num_layers=[4]", "space.decoder_first_pipeline_num_layers",
     "pipeline_split: first_last sizes the first and last stages"),
])
def test_deepspeed_and_megatron_names_for_the_new_knobs_name_ours(override, key, ours):
    with pytest.raises(SpecError, match=rf"{key}: unknown key; ParaTune calls it {ours}$"):
        load_spec(QUICKSTART, [override])


def test_precision_offload_overlap_and_bucket_are_space_knobs():
    spec = load_spec(QUICKSTART, ["space.precision=[bf16, fp8-tensorwise]",
                                  "space.offload=[none, optimizer]",
                                  "space.overlap_comm=[null, true]",
                                  "space.bucket_size=[null, 50000000]"])
    assert spec.space.precision == ["bf16", "fp8-tensorwise"]
    assert spec.space.offload == ["none", "optimizer"]
    assert spec.space.overlap_comm == [None, True] and spec.space.bucket_size == [None, 50000000]
    with pytest.raises(SpecError, match=r"space\.precision.*fp8-tensorwise"):
        load_spec(QUICKSTART, ["space.precision=[fp8]"])


def test_other_tools_names_for_a_knob_are_answered_with_ours():
    with pytest.raises(SpecError, match=r"space\.configs\[0\]\.context_parallel_size: unknown "
                                        r"key; ParaTune calls it cp$"):
        load_spec(QUICKSTART, ["space={kind: list, configs: [{tp: 1, context_parallel_size: 2}]}"])


@pytest.mark.parametrize("override, key", [("space.tp_size=[2]", "space.tp_size"),
                                           ("model.num_layer=2", "model.num_layer"),
                                           ("trial.stepz=3", "trial.stepz")])
def test_a_typo_is_still_an_unknown_key(override, key):
    with pytest.raises(SpecError, match=rf"{key}: unknown key; allowed keys here"):
        load_spec(QUICKSTART, [override])


def test_every_plain_entry_of_the_table_names_a_key_the_spec_lacks():
    """An entry whose feature has landed (the key is now a field) must leave the table."""
    for pattern, feature in NOT_SUPPORTED_YET.items():
        if any(c in pattern for c in "*?["):
            continue
        with pytest.raises(SpecError, match="not supported yet") as err:
            load_spec(QUICKSTART, [f"{pattern}=[2]"])
        assert feature in str(err.value)


# --- (c) knobs a command never sees -----------------------------------------------------------


def spec_of_command(caplog, *argv: str, **sections):
    data = quickstart_data(trial={"command": ["python", "train.py", *argv]}, **sections)
    return spec_warnings(caplog, data)


def test_knobs_the_command_never_sees_are_pinned_with_one_warning_each(caplog):
    spec, said = spec_of_command(caplog, "--mbs={micro_batch_size}")
    assert spec.space.micro_batch_size == [1, 4]  # the command sees it: searched
    assert spec.space.zero_stage == [0] and spec.space.activation_checkpointing == ["none"]
    assert len(said) == 2
    zero = next(m for m in said if m.startswith("space.zero_stage: "))
    assert "{zero_stage}" in zero and "{deepspeed_config}" in zero and "pinned to 0" in zero
    ac = next(m for m in said if m.startswith("space.activation_checkpointing: "))
    assert "put {activation_checkpointing} in trial.command" in ac
    assert len(spec.candidates()) == 2  # one per micro-batch, not 16 runs of 2 programs


def test_a_knob_that_reaches_the_command_another_way_is_kept(caplog):
    spec, said = spec_of_command(caplog, "--ds={deepspeed_config}",
                                 "--ac={activation_checkpointing}",
                                 space={"tp": [1, 2]})
    assert spec.space.zero_stage == [0, 1, 2, 3] and spec.space.micro_batch_size == [1, 4]
    assert spec.space.tp == [1, 2] and spec.space.activation_checkpointing == ["none", "full"]
    assert said == []


@pytest.mark.parametrize("placeholder", ["{dp}", "{grad_accum_steps}", "{trial_dir}"])
def test_the_world_and_batch_split_reach_the_command_through_what_follows_from_them(
        caplog, placeholder):
    spec, said = spec_of_command(caplog, f"--x={placeholder}", "--ac={activation_checkpointing}",
                                 "--z={zero_stage}", space={"tp": [1, 2]})
    assert spec.space.tp == [1, 2]
    if placeholder == "{dp}":  # the data-parallel degree says nothing of the micro-batch
        assert spec.space.micro_batch_size == [1]
        assert [m.split(":")[0] for m in said] == ["space.micro_batch_size"]
    else:
        assert spec.space.micro_batch_size == [1, 4] and said == []


def test_the_default_is_kept_when_listed_else_the_first_value(caplog):
    spec, said = spec_of_command(caplog, "--z={zero_stage}", "--mbs={micro_batch_size}",
                                 space={"activation_checkpointing": ["full", "selective"]})
    assert spec.space.activation_checkpointing == ["full"] and len(said) == 1


def test_listed_layouts_and_saved_specs_are_not_pinned(caplog):
    layouts = {"kind": "list", "configs": [{"zero_stage": 0}, {"zero_stage": 1}]}
    spec, said = spec_of_command(caplog, "--steps={steps}", space=layouts)
    assert len(spec.candidates()) == 2 and said == []
    data = quickstart_data(trial={"command": ["python", "train.py"]})
    spec, said = spec_warnings(caplog, data, saved=True)
    assert spec.space.zero_stage == [0, 1, 2, 3] and said == []


def test_the_warning_reaches_stderr_through_the_cli(tmp_path):
    data = quickstart_data(trial={"command": ["python", "train.py", "--mbs={micro_batch_size}",
                                         "--ac={activation_checkpointing}"]})
    path = tmp_path / "command.yaml"
    path.write_text(yaml.safe_dump(data))
    done = run_cli_process("run", str(path), "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "space.zero_stage" in line]
    assert len(lines) == 1 and lines[0].startswith("paratune: space.zero_stage: ")
