"""Nobody multiplies parallel degrees by hand: tp·pp·cp, dp·cp, 2·cp and every other product of
two degrees are `ParallelDims`' (orchestrator/layout/dims.py) to compute, and the rest of
orchestrator/, jobs/ and dashboards/ ask it. The check reads the source's syntax trees, so
products inside f-strings count and comments and docstrings do not."""

from __future__ import annotations

import ast
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGES = ("orchestrator", "jobs", "dashboards")
DEGREES = {"tp", "pp", "cp", "dp", "ep", "etp"}
THE_OBJECT = Path("orchestrator/layout/dims.py")


def _factor(node: ast.AST) -> str | int | None:
    """The degree (or integer constant) a factor names: `tp`, `x.tp`, `x["tp"]`,
    `x.get("tp", 1)`, `2`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)):
        return node.args[0].value
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    return None


def _is_product(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)


def _factors(node: ast.AST) -> list[ast.AST]:
    """The operands of a chain of multiplications, flattened."""
    if _is_product(node):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _chain(node: ast.AST) -> list[ast.AST]:
    """The multiplications a chain is made of (its operands' own products are not)."""
    return [node, *_chain(node.left), *_chain(node.right)] if _is_product(node) else []


def hand_products(root: Path) -> list[str]:
    """`path:line: expression` for each product of two degrees, or of 2 and cp, outside the
    layout object."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.relative_to(root) == THE_OBJECT:
                continue
            tree = ast.parse(path.read_text())
            inner = set()  # a chain's sub-products are reported with the chain
            for node in ast.walk(tree):
                if not _is_product(node) or id(node) in inner:
                    continue
                operands = _factors(node)
                inner |= {id(n) for n in _chain(node)}
                names = [_factor(n) for n in operands]
                degrees = [n for n in names if n in DEGREES]
                if len(degrees) >= 2 or ("cp" in degrees and 2 in names):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_each_way_a_product_is_written(tmp_path):
    package = tmp_path / "orchestrator"
    package.mkdir()
    (package / "sizes.py").write_text(
        'def f(c, v, s, tp, pp):\n'
        '    """tp * pp in a docstring is prose"""\n'
        '    a = c.tp * c.pp * c.cp  # c.dp * c.cp in a comment is prose\n'
        '    b = v["dp"] * v["cp"]\n'
        '    d = s.get("tp", 1) * s.get("pp", 1)\n'
        '    e = f"{2 * c.cp} chunks"\n'
        '    g = tp * pp\n'
        '    h = c.tp * c.hidden * 4\n'
        '    i = mbs * (world // (tp * pp))\n'
        '    return a, b, d, e, g, h, i\n')
    for folder in ("jobs", "dashboards"):
        (tmp_path / folder).mkdir()
    assert sorted(line.split(": ")[0] for line in hand_products(tmp_path)) == [
        f"orchestrator/sizes.py:{n}" for n in (3, 4, 5, 6, 7, 9)]


def test_no_module_multiplies_parallel_degrees_by_hand():
    assert hand_products(ROOT) == []


BEFORE = "2699ea7"  # the last commit before ParallelDims


def _has_commit(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_commit(BEFORE), reason="needs the repository's history")
def test_the_check_fails_on_the_tree_before_the_layout_object(tmp_path):
    """The commit before ParallelDims multiplied degrees in a dozen modules."""
    archive = tmp_path / "before.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), BEFORE, *PACKAGES],
                   check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "before", filter="data")
    before = hand_products(tmp_path / "before")
    assert any(line.startswith("orchestrator/space/config.py") and "self.tp * self.pp" in line
               for line in before)
    assert any(line.startswith("jobs/trainer.py") and "config.dp * config.cp" in line
               for line in before)
    assert len(before) > 20
