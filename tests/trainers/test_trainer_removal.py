"""A trainer is one folder and one registry line: in a copy of ParaTune with the
Megatron-Bridge folder and its registry line removed (and nothing else), the spec reads,
plans and exports every other example as before, and no other file of the copy names it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap

from conftest import ROOT

FOLDER = "megatron_bridge"
NAME = "megatron-bridge"
PACKAGES = ("orchestrator", "jobs", "dashboards")

PROBE = textwrap.dedent('''
    import json, sys
    from orchestrator.export import export, formats
    from orchestrator.campaign_spec import load_spec
    from orchestrator.trainers.registry import names, sections

    spec = load_spec(sys.argv[1])
    layout = spec.candidates()[0]
    print(json.dumps({"names": list(names()), "sections": list(sections()),
                      "formats": list(formats()),
                      "export": export("torchrun", spec, "t0001", layout)[:40]}))
''')


def _copy_without_the_trainer(tmp_path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(tmp_path / "orchestrator" / "trainers" / FOLDER)
    registry = tmp_path / "orchestrator" / "trainers" / "registry.py"
    lines = registry.read_text().splitlines(keepends=True)
    entry = [line for line in lines if line.startswith(f'    "{NAME}": ')]
    assert len(entry) == 1, "the trainer registers by exactly one TRAINERS line"
    registry.write_text("".join(line for line in lines if line not in entry))
    return tmp_path


def test_removing_a_trainer_is_removing_its_folder_and_its_registry_line(tmp_path):
    copy = _copy_without_the_trainer(tmp_path)
    mentions = [f"{path.relative_to(copy)}:{number}"
                for package in PACKAGES for path in sorted((copy / package).rglob("*.py"))
                for number, line in enumerate(path.read_text().splitlines(), 1)
                if re.search(rf"{NAME}|{FOLDER}", line)]
    assert mentions == [], "files outside the trainer's folder that name it"
    done = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "examples" / "quickstart.yaml")],
                          capture_output=True, text=True, cwd=copy, timeout=300,
                          env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert NAME not in seen["names"] and "megatron-lm" in seen["names"]
    assert FOLDER not in seen["sections"] and "megatron" in seen["sections"]
    assert NAME not in seen["formats"] and "megatron-lm" in seen["formats"]
    assert seen["export"].startswith("#!")
