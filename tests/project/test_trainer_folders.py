"""A trainer's own facts stay in its folder, so that adding one changes no file outside
`orchestrator/trainers/<tool>/` but its line in the registry: what its tests check it against
that pip installs without dependencies is its folder's requirements-no-deps.txt, which the
Makefile installs by a glob, and its documentation its folder's README.md, which `paratune
trainers` points to. So the Makefile and pyproject.toml name no package such a file holds, and
README.md names no trainer (it says `paratune trainers` lists them)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from orchestrator.trainers.registry import adapter_class, names

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "orchestrator" / "trainers"
REQUIREMENTS = "requirements-no-deps.txt"
INSTALL = "pip install --quiet --no-deps --ignore-requires-python -r"


def folder_requirements() -> dict[Path, list[Requirement]]:
    """Each trainer folder's requirements file, as the requirements it lists."""
    return {path: [Requirement(line.split("#")[0]) for line in path.read_text().splitlines()
                   if line.split("#")[0].strip()]
            for path in sorted(TRAINERS.glob(f"*/{REQUIREMENTS}"))}


def named(package: str, text: str) -> bool:
    """Whether `text` names the package, written with `-`, `_` or `.` between its words."""
    words = re.split(r"[-_.]+", canonicalize_name(package))
    return re.search(r"(?<![\w.-])" + r"[-_.]".join(map(re.escape, words)) + r"(?![\w-])",
                     text, re.I) is not None


def test_the_makefile_installs_every_trainer_folders_requirements_by_one_glob():
    makefile = (ROOT / "Makefile").read_text()
    assert f"orchestrator/trainers/*/{REQUIREMENTS}" in makefile
    assert INSTALL in makefile
    assert folder_requirements(), f"no trainer folder holds {REQUIREMENTS}: the glob finds none"


def test_the_makefile_and_pyproject_name_no_package_a_trainer_folder_installs():
    found = [f"{file} names {req.name} ({path.relative_to(ROOT)})"
             for path, reqs in folder_requirements().items() for req in reqs
             for file in ("Makefile", "pyproject.toml") if named(req.name, (ROOT / file).read_text())]
    assert found == []


def test_the_package_matcher_finds_a_package_however_its_name_is_written():
    assert named("megatron-core", "pip install megatron_core==1")
    assert named("megatron-core", '"Megatron-Core>=0.1"')
    assert not named("megatron-core", "megatron-core-extras") and not named("torchao", "torch")


def test_two_folders_that_pin_one_package_pin_the_same_release():
    pins: dict[str, set[str]] = {}
    for reqs in folder_requirements().values():
        for req in reqs:
            pins.setdefault(canonicalize_name(req.name), set()).add(str(req.specifier))
    assert {name: spec for name, spec in pins.items() if len(spec) > 1} == {}


def test_every_registered_trainers_folder_holds_its_readme():
    missing = []
    for name in names():
        folder = Path(inspect.getfile(adapter_class(name))).resolve().parent
        if not (folder / "README.md").is_file():
            missing.append(f"{name}: {folder.relative_to(ROOT)}/README.md")
    assert missing == []


def trainer_mentions(text: str, trainers: tuple[str, ...]) -> list[str]:
    """Where `text` names a trainer: `trainer: NAME` or `trainer=NAME` anywhere, an inline code
    span that is the name, or `--format NAME` (a format named for its trainer)."""
    found = []
    for name in trainers:
        word = re.escape(name)
        if re.search(rf"\btrainer\s*[:=]\s*{word}(?![\w-])", text):
            found.append(f"trainer: {name}")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        if span in trainers or any(span.endswith(f"--format {name}") for name in trainers):
            found.append(f"`{span}`")
    return found


def test_the_trainer_mention_finder_finds_each_way_of_naming_one():
    text = ("`trial.trainer` picks `toy` or `x`; trainer: toy\n```yaml\ntrainer=toy\n```\n"
            "`paratune best --format toy`, `toy-flags`, `examples/toy.yaml`")
    assert trainer_mentions(text, ("toy",)) == ["trainer: toy", "`toy`",
                                                "`paratune best --format toy`"]


def test_the_readme_names_no_trainer_their_folders_describe():
    assert trainer_mentions((ROOT / "README.md").read_text(), names()) == []
