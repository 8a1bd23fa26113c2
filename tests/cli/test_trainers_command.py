"""`paratune trainers` lists every trainer the registry holds, the built-in ones and one
registered at run time, each with the `trial` keys it reads, its launch-file formats and the
README.md of its folder, so no list of trainers is kept by hand anywhere else."""

from __future__ import annotations

import sys
import textwrap

import pytest
from builders import cli_json

from orchestrator.trainers.registry import adapter_class, names, register, unregister

TOY = textwrap.dedent('''
    """A trainer outside the package, with a section of its own and its own format."""

    from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun


    class ToyTrainer(TrainerAdapter):
        name = "toy"
        tool = "toy 1.0"
        trial_keys = ("toy_section",)
        export_formats = ("toy-flags", "torchrun")

        def run(self, spec, config, trial_id, folder, steps):
            return TrainerRun(program=["toy.py"], launcher="torchrun")

        def parse_log(self, text):
            return LogMetrics()
''')

MODULE = "listed_toy_trainer"


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy trainer in a folder of its own beside its README.md, registered for the test (its
    module imported afresh from this folder)."""
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(TOY)
    (folder / "README.md").write_text("# toy\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    register("toy", f"{MODULE}:ToyTrainer")
    yield folder
    unregister("toy")
    sys.modules.pop(MODULE, None)


def by_name(cli) -> dict[str, dict]:
    return {t["name"]: t for t in cli_json(cli, "trainers")["trainers"]}


def test_every_registered_trainer_is_listed_with_its_keys_formats_and_docs(cli):
    listed = by_name(cli)
    assert list(listed) == list(names())
    for name, t in listed.items():
        assert t["export_formats"] == list(adapter_class(name).export_formats), name
        assert t["docs"] is None or t["docs"].endswith("/README.md"), name
    # The keys of the spec's `trial` section each reads: declared by its adapter, or a section
    # named for the trainer (megatron-bridge's), or none (the built-in trainer's).
    assert listed["deepspeed"]["trial_keys"] == ["deepspeed"]
    assert listed["megatron-lm"]["trial_keys"] == ["megatron"]
    assert listed["megatron-bridge"]["trial_keys"] == ["megatron_bridge"]
    assert listed["command"]["trial_keys"] == ["command", "log_metrics", "runtime"]
    assert listed["builtin"]["trial_keys"] == [] and listed["builtin"]["default"]
    assert not listed["builtin"]["runs_a_program"] and listed["command"]["runs_a_program"]


def test_the_table_names_each_trainer_with_its_section_and_formats(cli):
    code, out, err = cli("trainers")
    assert code == 0, err
    for name in names():
        cls = adapter_class(name)
        assert name in out
        assert ",".join(cls.export_formats) in out, name
        assert all(f"trial.{key}" in out for key in cls.trial_keys), name
    assert "…" not in out  # nothing cut


def test_a_trainer_registered_at_run_time_is_listed_with_its_own_folders_docs(cli, toy):
    toy_entry = by_name(cli)["toy"]
    assert toy_entry["trial_keys"] == ["toy_section"]
    assert toy_entry["export_formats"] == ["toy-flags", "torchrun"]
    assert toy_entry["tool"] == "toy 1.0" and toy_entry["adapter"] == f"{MODULE}:ToyTrainer"
    assert toy_entry["docs"] == str((toy / "README.md").resolve())
    code, out, _ = cli("trainers")
    assert code == 0 and "toy" in out and "trial.toy_section" in out and "toy-flags" in out


def test_a_trainer_without_a_readme_says_so_rather_than_naming_a_missing_file(cli, toy):
    (toy / "README.md").unlink()
    assert by_name(cli)["toy"]["docs"] is None
