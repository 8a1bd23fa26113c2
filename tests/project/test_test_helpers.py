"""The tests' own layout: every test module sits in the folder of the stage it tests, and a
helper is written once (tests/builders.py and the shared modules beside it), not copied into
each test module that needs it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Folders of tests that mirror no orchestrator/ stage: the trial program, the report, the
# benchmark scripts, the layout schema and checks of the whole project.
OTHER_STAGES = {"jobs", "dashboards", "benchmarks", "layout", "project"}

def stages() -> set[str]:
    packages = {p.name for p in (ROOT / "orchestrator").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()}
    return packages | OTHER_STAGES


def helpers_defined(path: Path) -> set[str]:
    """The module-level functions of a test file that are neither tests, pytest fixtures
    (each module's own by design) nor pytest hooks."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
        if not (fixture or node.name.startswith(("test_", "pytest_"))):
            names.add(node.name)
    return names


def helpers_in_two_files(root: Path) -> dict[str, list[str]]:
    """Each helper name that two or more Python files under `root` define, with the files."""
    where = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for name in helpers_defined(path):
            where[name].append(str(path.relative_to(root)))
    return {name: files for name, files in where.items() if len(files) > 1}


def test_the_scan_finds_a_helper_copied_into_two_test_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "test_one.py").write_text(
        "import pytest\n\ndef layout(**f):\n    return f\n\n@pytest.fixture\ndef spec():\n"
        "    return 1\n\ndef test_x():\n    pass\n")
    (tmp_path / "b" / "test_two.py").write_text(
        "import pytest\n\ndef layout(**f):\n    return f\n\n@pytest.fixture\ndef spec():\n"
        "    return 2\n\ndef test_x():\n    pass\n")
    assert helpers_in_two_files(tmp_path) == {"layout": ["a/test_one.py", "b/test_two.py"]}


def test_the_scan_holds_two_programs_entry_points_to_it(tmp_path):
    program = "import sys\n\ndef main(path):\n    print(path)\n\n" \
              "if __name__ == '__main__':\n    main(sys.argv[1])\n"
    (tmp_path / "dist_one.py").write_text(program)
    (tmp_path / "dist_two.py").write_text(program)
    assert helpers_in_two_files(tmp_path) == {"main": ["dist_one.py", "dist_two.py"]}


def test_no_helper_is_defined_in_two_test_files():
    """No name is excused: two helpers that differ get names that say what each does, and
    the programs beside the tests (tests/dist_*.py, which torchrun starts) are held to it too."""
    assert helpers_in_two_files(TESTS) == {}, "define it once in tests/builders.py (or the " \
        "shared module it belongs with) and import it; a different helper gets its own name"


def test_every_test_module_sits_in_its_stage_folder():
    misplaced = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                 if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in stages()]
    assert misplaced == [], f"tests/<stage>/test_*.py, where <stage> is one of {sorted(stages())}"
