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

# Names that two test files define for different things, each local to its module. A name
# is listed only where the two are not one helper: a copy belongs in tests/builders.py.
HOMONYMS = {
    "main": "the entry point of each script torchrun starts (tests/dist_*.py)",
    "paratune": "test_crash_proof starts a controller it kills (Popen); test_service_client "
                "runs a client command against a server (run, with the server's token)",
    "run": "each module's own command: a Ray trial on the cluster, a command line the cost "
           "model's doc shows, a search example's campaign",
    "measured": "the held-out trials, a figure in a page, an export's argv, a README table",
    "simulated": "a finished campaign (cli, report) or the --set options of one (service)",
    "estimate": "a cost model's estimate of a model, or `paratune estimate` of an example",
    "priced": "an estimate of a spec's one layout, or a published row priced",
    "shown": "a cost-model doc figure as printed, or what a live display shows",
    "table_rows": "the rows of a terminal table, or of an HTML report's table",
    "summary_records": "each table test's own records (widths of seven digits, or a mix)",
    "_figures": "a validation page's numbers, or held-out rows' correlation and figures",
    "_trials": "each module's own view of the trials it ran",
    "as_user": "a bearer-token header, or a command run as another Unix user",
    "command_spec": "a campaign of a local program (harness), or a spec's warnings",
    "mechanism_failures": "context parallelism's mechanisms, or the other modes' (ZeRO, "
                          "recompute, compile)",
}


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


def test_no_helper_is_defined_in_two_test_files():
    copies = {name: files for name, files in helpers_in_two_files(TESTS).items()
              if name not in HOMONYMS}
    assert copies == {}, "define it once in tests/builders.py (or the shared module it " \
                         "belongs with) and import it"


def test_every_homonym_listed_is_still_defined_twice():
    """A listed name that is no longer defined twice leaves the list."""
    assert set(HOMONYMS) - set(helpers_in_two_files(TESTS)) == set()


def test_every_test_module_sits_in_its_stage_folder():
    misplaced = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                 if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in stages()]
    assert misplaced == [], f"tests/<stage>/test_*.py, where <stage> is one of {sorted(stages())}"
