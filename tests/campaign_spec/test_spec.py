"""Spec validation: every malformed spec is one line on stderr naming the key, exit code 2."""

from __future__ import annotations

import pytest
import yaml
from conftest import EXAMPLES, run_cli_process, write_spec

from orchestrator.common.errors import SpecError
from orchestrator.campaign_spec import (
    SPEC_FILE,
    LocalBackendSpec,
    RayBackendSpec,
    SimulatedBackendSpec,
    SlurmBackendSpec,
    load_campaign_spec,
    load_spec,
    spec_from_dict,
)

QUICKSTART = EXAMPLES / "quickstart.yaml"


def test_quickstart_loads_with_presets_resolved():
    spec = load_spec(QUICKSTART)
    assert spec.model.name == "tiny" and spec.cluster.name == "cpu-local"
    assert spec.world_size == 2
    assert 1e6 < spec.model.num_params < 10e6


def test_set_overrides_nested_keys_and_preset_fields():
    spec = load_spec(QUICKSTART, ["budget.max_trials=3", "model.seq_len=64", "trial.env.A=1"])
    assert spec.budget.max_trials == 3
    assert spec.model.seq_len == 64 and spec.model.hidden == 256  # rest of the preset kept
    assert spec.trial.env == {"A": "1"}


# (what is broken, how to break it, words the error must contain)
MALFORMED = [
    ("unknown top-level key", {"colour": "red"}, ["colour", "unknown key", "allowed keys"]),
    ("unknown nested key", {"budget": {"max_trails": 3}}, ["budget.max_trails", "unknown key", "max_trials"]),
    ("wrong type", {"budget": {"max_trials": "many"}}, ["budget.max_trials", "integer"]),
    ("tp does not divide heads", {"space": {"tp": [3]}}, ["space.tp", "tp=3", "num_heads=4", "1, 2, 4"]),
    ("pp does not divide layers", {"space": {"pp": [3]}}, ["space.pp", "pp=3", "num_layers=4"]),
    ("unknown model preset", {"model": "llama-8t"}, ["model", "llama-8t", "llama-7b"]),
    ("unknown cluster preset", {"cluster": "summit"}, ["cluster", "summit", "frontier"]),
    ("bad choice", {"search": {"algorithm": "genetic"}}, ["search.algorithm", "grid", "random"]),
    ("out of range", {"budget": {"max_trials": 0}}, ["budget.max_trials", "greater than 0"]),
    ("bad zero stage", {"space": {"zero_stage": [4]}}, ["space.zero_stage", "0", "3"]),
    ("bad campaign name", {"name": "my campaign/1"}, ["name", "pattern"]),
]


@pytest.mark.parametrize("what,change,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_spec_is_one_line_exit_2(tmp_path, cli, what, change, words):
    spec = write_spec(tmp_path / "bad.yaml", **change)
    code, out, err = cli("run", str(spec), "--dry-run")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(spec) in lines[0]
    for word in words:
        assert word in lines[0], f"{what}: {word!r} missing from {lines[0]!r}"
    assert "Traceback" not in err and out == ""


def test_missing_required_key(tmp_path, cli):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\nmodel: tiny\ncluster: cpu-local\n")
    code, _, err = cli("run", str(spec), "--dry-run")
    assert code == 2 and err.count("\n") == 1
    assert "scale" in err and "required" in err


def test_missing_file(tmp_path, cli):
    code, _, err = cli("run", str(tmp_path / "nope.yaml"))
    assert code == 2 and err.count("\n") == 1
    assert "nope.yaml" in err and "not found" in err


def test_yaml_syntax_error(tmp_path, cli):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\nmodel: [tiny\n")
    code, _, err = cli("run", str(spec))
    assert code == 2 and err.count("\n") == 1
    assert "YAML" in err and "line" in err


def test_bad_override(cli):
    code, _, err = cli("run", str(QUICKSTART), "--set", "budget.max_trials")
    assert code == 2 and "KEY.PATH=VALUE" in err
    code, _, err = cli("run", str(QUICKSTART), "--set", "budget.max_trials=-1")
    assert code == 2 and "budget.max_trials" in err


def test_real_process_prints_no_traceback(tmp_path):
    spec = write_spec(tmp_path / "bad.yaml", space={"tp": [3]})
    proc = run_cli_process("run", str(spec))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "space.tp" in proc.stderr


def test_spec_error_type():
    with pytest.raises(SpecError):
        load_spec(QUICKSTART, ["cluster=nowhere"])


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_spec_is_valid_and_dry_runs(cli, example):
    code, out, err = cli("run", str(EXAMPLES / example), "--dry-run")
    assert code == 0, err
    assert "valid configs" in out


def test_modes_example_lists_every_two_rank_mode_once():
    candidates = load_spec(EXAMPLES / "modes.yaml").search_space().candidates()
    assert len(candidates) == len(set(candidates)) == 12
    assert {c.zero_stage for c in candidates} == {0, 1, 2, 3}
    assert {c.pp_schedule for c in candidates if c.pp > 1} == {"gpipe", "1f1b", "interleaved"}
    assert any(c.sequence_parallel for c in candidates) and any(c.compile for c in candidates)


# Backend sections: one model per kind, chosen by `kind`.

def test_key_of_another_backend_kind_is_one_line_exit_2(tmp_path, cli):
    spec = write_spec(tmp_path / "bad.yaml", backend={"kind": "slurm", "noise": 0.1})
    code, out, err = cli("run", str(spec), "--dry-run")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"{spec}: backend.noise: unknown key for backend kind 'slurm'" in lines[0]
    assert "allowed keys here: kind, partition, account" in lines[0]
    assert "seed" not in lines[0] and "backend.slurm" not in lines[0]


def test_bad_value_in_a_backend_section_names_the_plain_key(tmp_path):
    path = write_spec(tmp_path / "bad.yaml", backend={"kind": "slurm", "time_limit_min": 0})
    with pytest.raises(SpecError, match=r"backend\.time_limit_min: .*greater than 0"):
        load_spec(path)


def test_unknown_backend_kind_lists_the_kinds(tmp_path, cli):
    spec = write_spec(tmp_path / "bad.yaml", backend={"kind": "kubernetes"})
    code, _, err = cli("run", str(spec), "--dry-run")
    assert code == 2 and err.count("\n") == 1
    assert "backend.kind: unknown backend kind 'kubernetes'" in err
    assert "choose one of local, simulated, ray, slurm" in err


@pytest.mark.parametrize("section", [None, {}, {"kind": "local"}])
def test_backend_omitted_or_empty_is_local(tmp_path, section):
    data = yaml.safe_load(QUICKSTART.read_text())
    data.pop("backend", None)
    if section is not None:
        data["backend"] = section
    spec = spec_from_dict(data)
    assert isinstance(spec.backend, LocalBackendSpec) and spec.backend.kind == "local"
    assert spec.model_dump()["backend"] == {"kind": "local"}


def test_backend_set_through_overrides():
    spec = load_spec(QUICKSTART, ["backend.kind=simulated", "backend.noise=0"])
    assert isinstance(spec.backend, SimulatedBackendSpec)
    assert spec.backend.noise == 0 and spec.backend.seed == 0
    with pytest.raises(SpecError, match="backend.noise: unknown key for backend kind 'ray'"):
        load_spec(QUICKSTART, ["backend.kind=ray", "backend.noise=0"])


def test_each_kind_keeps_its_defaults():
    slurm = SlurmBackendSpec()
    assert (slurm.time_limit_min, slurm.array_parallelism, slurm.max_requeues) == (60, 8, 2)
    assert slurm.setup == [] and slurm.sbatch_args == {}
    assert RayBackendSpec().gpus_per_rank == 0.0 and RayBackendSpec().address is None
    assert SimulatedBackendSpec().noise == 0.03


def test_a_users_flat_backend_section_is_still_an_error(tmp_path):
    """Only saved campaigns get the 0.1 layout's extra keys dropped, never a user's spec."""
    path = write_spec(tmp_path / "flat.yaml", backend={"kind": "simulated", "partition": None})
    with pytest.raises(SpecError, match="backend.partition: unknown key for backend kind"):
        load_spec(path)


def test_step_time_is_an_objective():
    spec = load_spec(QUICKSTART, ["objective.metric=step_time_s", "objective.mode=min"])
    assert spec.objective.metric == "step_time_s"


def test_the_objective_mode_follows_its_metric():
    """Left out, the mode is the metric's direction; stated against it, it would crown the
    worst layout, so it is refused in one line that names the fix."""
    assert load_spec(QUICKSTART, ["objective={metric: step_time_s}"]).objective.mode == "min"
    assert load_spec(QUICKSTART, ["objective={metric: mfu}"]).objective.mode == "max"
    # The quickstart states `mode: max`: changing only its metric is the mistake refused.
    with pytest.raises(SpecError, match="objective.mode: step_time_s is better smaller; set "
                                        "mode: min"):
        load_spec(QUICKSTART, ["objective.metric=step_time_s"])
    with pytest.raises(SpecError, match="objective.mode: tokens_per_s is better larger"):
        load_spec(QUICKSTART, ["objective.mode=min"])


def test_a_saved_campaign_keeps_the_mode_it_ran_with(tmp_path):
    """A campaign an earlier version saved with a mode against its metric still opens."""
    spec = load_spec(QUICKSTART, ["name=old-pairing"])
    saved = spec.model_dump(mode="json")
    saved["objective"] = {"metric": "step_time_s", "mode": "max"}
    (tmp_path / "old-pairing").mkdir()
    (tmp_path / "old-pairing" / SPEC_FILE).write_text(yaml.safe_dump(saved))
    assert load_campaign_spec(tmp_path, "old-pairing").objective.mode == "max"


def test_a_screen_measures_fewer_steps_than_a_full_trial():
    fidelity = "search.fidelity={screening_steps: 6, keep_fraction: 0.5}"
    with pytest.raises(SpecError, match=r"search.fidelity.screening_steps: 6 is not fewer than "
                                        r"trial.steps \(6\)"):
        load_spec(QUICKSTART, [fidelity])
    assert load_spec(QUICKSTART, [fidelity, "trial.steps=7"]).search.fidelity.screening_steps == 6


def test_a_tracking_uri_names_its_scheme():
    with pytest.raises(SpecError, match="tracking.uri: 'notaurl' is not a tracking URI"):
        load_spec(QUICKSTART, ["tracking.uri=notaurl"])
    for uri in ("sqlite:////tmp/m.db", "http://127.0.0.1:5000", "postgresql://u@h/db",
                "file:///tmp/mlruns", "databricks"):
        assert load_spec(QUICKSTART, [f"tracking.uri={uri}"]).tracking.uri == uri


def test_a_value_yaml_reads_as_a_date_or_number_is_told_to_be_quoted(tmp_path):
    path = write_spec(tmp_path / "dated.yaml")
    path.write_text(path.read_text().replace("name: quickstart", "name: 2024-06-01"))
    with pytest.raises(SpecError, match=r"name: Input should be a valid string \(got "
                                        r"datetime.date\(2024, 6, 1\)\); YAML read it as "
                                        r"another type: put it in quotes"):
        load_spec(path)


@pytest.mark.parametrize("key,text,told", [
    ("budget.wall_clock_s", "3.0e3", "write it with a point and a signed exponent (3.0e+03) "
                                     "or in full (3000)"),
    ("budget.gpu_hours", "1e2", "(1.0e+02) or in full (100)"),
    ("budget.max_trials", "1E2", "write it in full (100)"),
])
def test_a_number_yaml_reads_as_text_is_told_how_to_write_it(tmp_path, key, text, told):
    """YAML 1.1 reads 3.0e3 (no sign in the exponent) as a string; 3.0e+03 as a number."""
    section, field = key.split(".")
    path = write_spec(tmp_path / "sci.yaml", **{section: {field: "NUMBER"}})
    path.write_text(path.read_text().replace("NUMBER", text))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert f"{key}: " in str(info.value) and f"YAML reads {text} as text: " in str(info.value)
    assert str(info.value).endswith(told)
    path.write_text(path.read_text().replace(text, f"{float(text):.1e}" if "max" not in key
                                             else f"{float(text):.0f}"))
    assert load_spec(path) is not None
