"""One object, one name: a layout is a `Layout`, and a parameter that holds one is `layout`
(or says which layout it is: `base`, `slice_layout`), never `config`. Read from the source: a
parameter named `config` in the packages is annotated with another configuration's type
(`ServiceConfig`, torchtitan's config name as `str`), or listed below with what it is."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "dashboards")
# (file, function) -> what its unannotated `config` is, where it is not a layout.
OTHER_CONFIGS = {
    ("orchestrator/cli/service.py", "_serve"): "the service's settings (ServiceConfig)",
}
NOT_A_LAYOUT = {"ServiceConfig", "str"}


def parameters(root: Path):
    """(file, function, parameter name, annotation text) for every function parameter."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    args = node.args
                    name = getattr(node, "name", "<lambda>")
                    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                        annotation = ast.unparse(arg.annotation) if arg.annotation else ""
                        yield str(path.relative_to(root)), name, arg.arg, annotation


def misnamed(root: Path) -> list[str]:
    """`file:function: config [annotation]` for each parameter named `config` that may hold a
    layout: unannotated, `Any` or `Layout`, and not listed above."""
    return [f"{file}:{function}: config {annotation}".rstrip()
            for file, function, name, annotation in parameters(root)
            if name == "config" and annotation not in NOT_A_LAYOUT
            and (file, function) not in OTHER_CONFIGS]


def test_the_check_finds_a_layout_named_config(tmp_path):
    (tmp_path / "orchestrator").mkdir()
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "orchestrator" / "x.py").write_text(
        "def a(config): pass\n"
        "def b(config: Layout): pass\n"
        "f = lambda spec, config: None\n"
        "def c(layout: Layout, config: ServiceConfig, other: int): pass\n")
    assert misnamed(tmp_path) == ["orchestrator/x.py:a: config",
                                  "orchestrator/x.py:b: config Layout",
                                  "orchestrator/x.py:<lambda>: config"]


def test_a_parameter_holding_a_layout_is_named_layout():
    assert misnamed(ROOT) == []
