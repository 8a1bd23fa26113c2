"""The seams of ARCHITECTURE.md, checked on the source: no import cycle, no stage importing a
stage it must not, no capability probing of backends and searchers. (One concept per module:
test_sprawl.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "jobs", "dashboards")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules `path` imports anywhere in it (module level, functions, TYPE_CHECKING):
    `from a.b import c` counts as a.b.c where c is a module, else as a.b."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = import_graph()
    assert "orchestrator.scheduling.controller" in graph and graph["orchestrator.scheduling.controller"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


README = ROOT / "README.md"
ANY_BUT_CLI_AND_SERVICE = "any module but the CLI and the service"


def readme_table(after: str) -> list[list[str]]:
    """The rows of the first Markdown table after the line `after` in the README, as cells
    with their backticks removed."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows, seen_table = [], False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            seen_table = True
            cells = [c.strip().replace("`", "") for c in line.strip("|").split("|")]
            if not set(cells[0]) <= set("- "):
                rows.append(cells)
        elif seen_table:
            break
    return rows[1:]  # past the header


def forbidden_rules() -> list[tuple[str, str]]:
    """(importer, imported) prefixes from the README's import table."""
    rules = []
    for importer, imported, _why in readme_table("Which stage must not import which"):
        for target in imported.split(","):
            rules.append((importer.strip(), target.strip()))
    return rules


def test_the_readme_import_table_is_read():
    rules = forbidden_rules()
    assert ("orchestrator.costmodel", "orchestrator.campaign_spec") in rules
    assert (ANY_BUT_CLI_AND_SERVICE, "orchestrator.server") in rules and len(rules) > 30


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("importer,imported", forbidden_rules())
def test_forbidden_imports(importer, imported):
    graph = import_graph()
    if importer == ANY_BUT_CLI_AND_SERVICE:
        importer = "orchestrator"
        graph = {k: v for k, v in graph.items()
                 if not _within(k, "orchestrator.cli") and not _within(k, "orchestrator.server")}
    # A leaf package that must import nothing wider (the layout schema) may import itself.
    itself = importer if _within(importer, imported) else None
    edges = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                   if _within(a, importer) and _within(b, imported)
                   and not (itself and _within(b, itself)))
    assert edges == []


def test_the_readme_layout_table_matches_the_tree():
    """Every folder and top-level module of orchestrator/ has a row, and every row exists."""
    listed = {row[0].rstrip("/") for row in readme_table("## Layout")}
    on_disk = {f"orchestrator/{p.name}" for p in (ROOT / "orchestrator").iterdir()
               if (p.is_dir() and (p / "__init__.py").exists())
               or (p.suffix == ".py" and p.name != "__init__.py")}
    assert on_disk - listed == set(), "in orchestrator/ but not in the README's layout table"
    missing = {path for path in listed if not (ROOT / path).exists()}
    assert missing == set(), "in the README's layout table but not on disk"


def test_no_backend_imports_another_backend():
    graph = import_graph()
    kinds = ("local", "simulated", "ray", "slurm")
    backend = {k: f"orchestrator.backends.{k}" for k in kinds}
    crossing = [f"{a} -> {b}" for kind, a in backend.items() for b in graph[a]
                if b in backend.values() and b != a]
    assert crossing == []


def test_jobs_import_only_the_result_and_layout_schemas():
    graph = import_graph()
    from_jobs = {b for a, targets in graph.items() if a.startswith("jobs") for b in targets
                 if not b.startswith("jobs")}
    # The layout schema: the knobs and sizes (layout/) and how a pipeline splits the layers.
    allowed = ("orchestrator.result", "orchestrator.layout", "orchestrator.pipeline_split")
    assert {b for b in from_jobs if not any(_within(b, a) for a in allowed)} == set()


def test_no_capability_probing_of_backends_or_searchers():
    """Optional methods have defaults on the bases, so nobody asks what an object can do."""
    bases = {ROOT / "orchestrator/backends/base.py", ROOT / "orchestrator/search/base.py"}
    probes = []
    for path in (ROOT / "orchestrator").rglob("*.py"):
        if path in bases:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("hasattr", "getattr") and node.args:
                target = ast.unparse(node.args[0]).lower()
                if "backend" in target or "searcher" in target:
                    probes.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert probes == []
