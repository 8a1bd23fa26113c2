"""The seams of ARCHITECTURE.md, checked on the source: no import cycle, no stage importing a
stage it must not, no capability probing of backends and searchers, no oversized module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def _imports(graph, importer_prefix: str, imported_prefix: str) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if a.startswith(importer_prefix) and b.startswith(imported_prefix))


FORBIDDEN = [
    ("orchestrator.space", "orchestrator.spec"),  # plain ranges in
    ("orchestrator.space", "orchestrator.costmodel"),
    ("orchestrator.layout", "orchestrator."),  # the knob schema is a stdlib leaf jobs/ imports
    ("orchestrator.result", "orchestrator."),
    ("orchestrator.common", "orchestrator.space"),  # leaf helpers import no stage
    ("orchestrator.common", "orchestrator.spec"),
    ("orchestrator.common", "orchestrator.scheduling"),
    ("orchestrator.costmodel", "orchestrator.spec"),  # the model is pure: plain shapes in
    ("orchestrator.costmodel", "orchestrator.backends"),
    ("orchestrator.costmodel", "orchestrator.tracking"),
    ("orchestrator.costmodel", "orchestrator.scheduling"),
    ("orchestrator.costmodel", "orchestrator.record"),
    ("orchestrator.search", "orchestrator.backends"),  # searchers propose, backends run
    ("orchestrator.search", "orchestrator.scheduling"),
    ("orchestrator.search", "orchestrator.spec"),
    ("orchestrator.backends", "orchestrator.search"),
    ("orchestrator.backends", "orchestrator.scheduling"),
    ("orchestrator.backends", "orchestrator.spec"),  # a trial request carries what a backend needs
    ("orchestrator.trainers", "orchestrator.backends"),
    ("orchestrator.trainers", "orchestrator.scheduling"),
    ("orchestrator.trial", "orchestrator.backends"),  # the trial-folder owner sits below them
    ("orchestrator.trial", "orchestrator.scheduling"),
    ("orchestrator.record", "orchestrator.scheduling"),  # the record is read without scheduling
    ("orchestrator.record", "orchestrator.backends"),
    ("orchestrator.record", "orchestrator.tracking"),  # MLflow mirrors the record, not back
    ("orchestrator.tracking", "orchestrator.scheduling"),
    ("orchestrator.tracking", "orchestrator.backends"),
    ("orchestrator.export", "orchestrator.scheduling"),
    ("orchestrator.export", "orchestrator.backends"),
    ("orchestrator.", "orchestrator.cli"),  # the core knows no screen
    ("orchestrator.", "orchestrator.server"),  # ... and no HTTP
    ("orchestrator.server", "orchestrator.scheduling"),  # controllers run as child processes,
    ("orchestrator.server", "orchestrator.backends"),  # the service never schedules trials
    ("orchestrator.server", "orchestrator.cli"),
    ("dashboards", "orchestrator.cli"),
    ("dashboards", "orchestrator.scheduling"),
    ("jobs", "orchestrator.spec"),  # a trial runs with only torch installed
    ("jobs", "orchestrator.scheduling"),
]


@pytest.mark.parametrize("importer,imported", FORBIDDEN)
def test_forbidden_imports(importer, imported):
    graph = import_graph()
    if importer == "orchestrator.":  # everything but the CLI and the service themselves
        graph = {k: v for k, v in graph.items()
                 if not k.startswith(("orchestrator.cli", "orchestrator.server"))}
    assert _imports(graph, importer, imported) == []


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
    assert from_jobs <= {"orchestrator.result", "orchestrator.layout"}


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


def test_no_source_file_over_300_lines():
    long = [f"{p.relative_to(ROOT)} ({n})" for p in source_modules().values()
            if (n := len(p.read_text().splitlines())) > 300]
    assert long == []
