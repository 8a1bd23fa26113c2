"""Hostile or mistaken input is one line on stderr and exit 2, before anything is written:
undecodable or oversized files, deep nesting, alias bombs, duplicate keys, non-numbers where
numbers belong, empty search spaces, bad environment entries, missing programs, unusable runs
directories, out-of-range options and campaign names that leave the runs directory."""

from __future__ import annotations


import pytest
from builders import one_line_error

B = ("name: x\nmodel: tiny\ncluster: cpu-local\n"
     "scale: {nodes: 1, gpus_per_node: 2, global_batch_size: 8}\ntracking: {enabled: false}\n")


@pytest.fixture
def spec_file(tmp_path):
    def write(text: str | bytes = B, name: str = "spec.yaml"):
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)
    return write


def test_non_utf8_spec(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(b"name: caf\xe9\n")), "UTF-8", "line 1")


def test_deep_nesting(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file("[" * 10000)), "nested more than")


def test_oversized_file(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(B + "#" * (2 << 20) + "\n")), "larger than")


def test_alias_bomb_is_refused_quickly(cli, spec_file, runs_dir):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    one_line_error(cli("run", spec_file("\n".join(lines) + "\n")), "aliases expand")


def test_a_huge_flat_mapping_is_refused_for_its_size_not_for_aliases(cli, spec_file, runs_dir):
    keys = "".join(f"k{i}: {i}\n" for i in range(12_000))  # 24,000 values, no alias
    code, out, err = cli("run", spec_file(B + keys))
    one_line_error((code, out, err), "more than 20,000 values")
    assert "alias" not in err


def test_a_small_alias_is_fine(cli, spec_file, runs_dir):
    text = B + "space: {tp: &one [1], pp: *one}\n"
    code, out, err = cli("run", spec_file(text), "--dry-run")
    assert code == 0, err


def test_recursive_alias(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(B + "search: &s {seed: *s}\n")), "recursive alias")


def test_duplicate_key_names_key_and_line(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(B + "name: y\n"), "--dry-run"),
                   "duplicate key 'name'", "line 6")


def test_huge_value_is_quoted_short(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(B + f"search: {{algorithm: {'x' * 100000}}}\n"),
                       "--dry-run"), "search.algorithm")
    one_line_error(cli("run", spec_file(B + "budget: {max_trials: " + "9" * 5000 + "}\n"),
                       "--dry-run"))


@pytest.mark.parametrize("entry", ["{tp: 0}", "{tp: a}", "{tp: 1.5}", "{colour: 1}",
                                   "{sharding: {s0p: 0}}", "{zero_stage: true}"])
def test_bad_listed_layout(cli, spec_file, runs_dir, entry):
    text = B + f"space: {{kind: list, configs: [{entry}]}}\n"
    one_line_error(cli("run", spec_file(text)), "space.configs")
    assert not runs_dir.exists()


@pytest.mark.parametrize("override,words", [
    ("scale.global_batch_size=7", ["scale.global_batch_size 7", "space.micro_batch_size"]),
    ("space.tp=[4]", ["space.tp [4]", "world size 2"]),
    ("space.zero_stage=[3]", ["space.zero_stage"]),
])
@pytest.mark.parametrize("command", [("run", "--dry-run"), ("run",), ("plan",), ("estimate",)])
def test_empty_space_says_why(cli, spec_file, runs_dir, override, words, command):
    one_gpu = override.startswith("space.zero_stage")  # dp = 1: ZeRO 3 shards over nothing
    # A space of its own: without one, run and plan search the whole space, where tp 2 holds
    # a batch of 7.
    spec = (B.replace("gpus_per_node: 2", "gpus_per_node: 1") if one_gpu else B)
    path = spec_file(spec + "space: {tp: [1], pp: [1]}\n")
    one_line_error(cli(command[0], path, *command[1:], "--set", override),
                   "no valid layout", *words)
    assert not runs_dir.exists()


@pytest.mark.parametrize("override,key", [
    ("scale.nodes=1000000000000000000000000000000", "scale.nodes"),
    ("trial.steps=true", "trial.steps"),
    ("budget.max_trials=2.0", "budget.max_trials"),
    ("space.sequence_parallel=[1]", "space.sequence_parallel"),
    ("backend.kind=simulated", None),
    ("trial.timeout_s=.nan", "trial.timeout_s"),
    ("search.seed=-1", "search.seed"),
    ("model.hidden=100000000000", "model.hidden"),
])
def test_strict_and_bounded_numbers(cli, spec_file, runs_dir, override, key):
    result = cli("run", spec_file(), "--dry-run", "--set", override)
    if key is None:
        assert result[0] == 0, result[2]
    else:
        one_line_error(result, key)


def test_float_fields_take_ints(cli, spec_file, runs_dir):
    code, _, err = cli("run", spec_file(), "--dry-run", "--set", "trial.timeout_s=30")
    assert code == 0, err


@pytest.mark.parametrize("env,key", [
    ("{A=B: x}", "'A=B' is not an environment variable name"),
    ("{A: [1, 2]}", "A: give a string"),
    ("{A: {b: 1}}", "A: give a string"),
    ('{A: "a\\0b"}', "trial.env.A"),
])
def test_bad_env(cli, spec_file, runs_dir, env, key):
    one_line_error(cli("run", spec_file(B + f"trial: {{env: {env}}}\n")), "trial.env", key)
    assert not runs_dir.exists()


def test_env_scalars_become_strings(spec_file):
    from orchestrator.campaign_spec import load_spec
    spec = load_spec(spec_file(B + "trial: {env: {A: 4, B: 1.5, C: true, D: x}}\n"))
    assert spec.trial.env == {"A": "4", "B": "1.5", "C": "True", "D": "x"}


@pytest.mark.parametrize("trial,words", [
    ("{workdir: /no/such/dir}", ["trial.workdir", "does not exist"]),
    ("{command: [no-such-program-xyz]}", ["trial.command[0]", "no-such-program-xyz"]),
    ("{command: [./missing.sh]}", ["trial.command[0]", "not an executable"]),
])
def test_trial_program_and_workdir_checked_before_the_run(cli, spec_file, runs_dir, trial, words):
    one_line_error(cli("run", spec_file(B + f"trial: {trial}\n")), *words)
    assert not runs_dir.exists()


@pytest.mark.parametrize("where", ["/proc/paratune-runs", "{file}/runs"])
def test_unusable_runs_dir(cli, spec_file, tmp_path, monkeypatch, where):
    monkeypatch.delenv("PARATUNE_RUNS_DIR", raising=False)
    (tmp_path / "file").write_text("x")
    runs = where.format(file=tmp_path / "file")
    one_line_error(cli("run", spec_file(B.replace("{enabled: false}",
                                                  f"{{enabled: false, runs_dir: '{runs}'}}"))),
                   "tracking.runs_dir")


def test_ui_port_checked_first(cli, runs_dir):
    one_line_error(cli("ui", "--port", "99999"), "--port")
    assert not runs_dir.exists()


def test_plan_top_k_must_be_positive(cli, spec_file, runs_dir):
    one_line_error(cli("plan", spec_file(), "--top-k", "-1"), "--top-k")


@pytest.mark.parametrize("command", [("resume",), ("status",), ("best",), ("report",),
                                     ("calibrate",), ("ui",)])
@pytest.mark.parametrize("name", ["../../outside", "../x", ".hidden", "a/b", "/etc"])
def test_campaign_names_cannot_leave_the_runs_dir(cli, runs_dir, tmp_path, command, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "spec.yaml").write_text(B)
    one_line_error(cli(*command, name), "not a campaign name")


def test_warm_start_is_a_campaign_name(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(B + "search: {warm_start: ../../outside}\n"),
                       "--dry-run"), "search.warm_start")


def test_valid_spec_still_dry_runs(cli, spec_file, runs_dir):
    code, out, err = cli("run", spec_file(), "--dry-run")
    assert code == 0 and "valid configs" in out and not runs_dir.exists()
