"""A trainer's own `trial` section lives in its folder: a trainer folder written in a temporary
package, with a section.py and registered by one line before the spec is read, gets its
section accepted under it and refused under another trainer, with no file of ParaTune's
changed. A folder registered after the spec was read is told to register first."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import ROOT

FOLDER = {
    "__init__.py": '"""A toy trainer in a folder of its own."""\n',
    "section.py": textwrap.dedent('''
        from pydantic import Field

        from orchestrator.trainers.section import TrainerSection


        class ToySection(TrainerSection):
            """The toy's own recipe."""

            trial_key = "toy"
            recipe: str = Field(pattern=r"^[a-z]+$")

            def input_files(self):
                return [self.recipe + ".toml"]


        SECTION = ToySection
    '''),
    "adapter.py": textwrap.dedent('''
        from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun


        class ToyTrainer(TrainerAdapter):
            name = "toy"
            tool = "toy 1.0"

            def run(self, spec, config, trial_id, folder, steps):
                return TrainerRun(program=["toy.py", spec.trial.toy.recipe], launcher="torchrun")

            def parse_log(self, text):
                return LogMetrics()
    '''),
}

PROBE = textwrap.dedent('''
    import json, sys
    from orchestrator.trainers.registry import register
    register("toy", "toy_folder.adapter:ToyTrainer")
    from orchestrator.common.errors import SpecError
    from orchestrator.campaign_spec import spec_from_dict
    from orchestrator.campaign_spec.trial import campaign_inputs

    def spec(trial):
        return {"name": "t", "model": {"preset": "tiny"}, "cluster": {"preset": "cpu-local"},
                "scale": {"nodes": 1, "global_batch_size": 8}, "trial": trial}

    def error(trial):
        try:
            spec_from_dict(spec(trial))
        except SpecError as caught:
            return str(caught)
        return None

    accepted = spec_from_dict(spec({"trainer": "toy", "toy": {"recipe": "small"}}))
    print(json.dumps({
        "recipe": accepted.trial.toy.recipe,
        "inputs": [str(p) for p in campaign_inputs(accepted.trial)],
        "under_another": error({"trainer": "builtin", "toy": {"recipe": "small"}}),
        "bad_value": error({"trainer": "toy", "toy": {"recipe": "Small!"}}),
        "missing": error({"trainer": "toy"}),
    }))
''')


def _toy_folder(tmp_path):
    folder = tmp_path / "toy_folder"
    folder.mkdir()
    for name, text in FOLDER.items():
        (folder / name).write_text(text)
    return tmp_path


def _python_with_toy_on_path(code: str, path) -> subprocess.CompletedProcess:
    env_path = f"{path}:{ROOT}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
                          timeout=300)


def test_a_trainer_folder_brings_its_own_section(tmp_path):
    done = _python_with_toy_on_path(PROBE, _toy_folder(tmp_path))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["recipe"] == "small"
    assert seen["inputs"] == ["small.toml"]
    assert "trial.toy" in seen["under_another"] and "another trainer" in seen["under_another"]
    assert "trial.toy.recipe" in seen["bad_value"] and "Traceback" not in seen["bad_value"]
    assert "trial.toy" in seen["missing"] and "recipe" in seen["missing"]


def test_a_folder_with_a_section_registered_after_the_spec_was_read_is_told_to_register_first(
        tmp_path):
    late = textwrap.dedent('''
        import orchestrator.campaign_spec
        from orchestrator.trainers.registry import names, register
        try:
            register("toy", "toy_folder.adapter:ToyTrainer")
        except ValueError as caught:
            print(caught)
        print("toy" in names())
    ''')
    done = _python_with_toy_on_path(late, _toy_folder(tmp_path))
    assert done.returncode == 0, done.stderr
    message, registered = done.stdout.strip().splitlines()
    assert "trial.toy" in message and "before the spec is read" in message
    assert registered == "False"
