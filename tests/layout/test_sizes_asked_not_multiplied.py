"""Nobody multiplies parallel degrees by hand: tp·pp·cp, dp·cp, 2·cp and every other product of
two degrees are `ParallelDims`' (orchestrator/layout/dims.py) to compute, and the rest of
orchestrator/, jobs/ and dashboards/ ask it. So are the shares of a node or of the world a
group takes (gpus_per_node // tp, -(-tp // gpus_per_node), world // (tp·pp·cp)) and the
samples of a step (micro_batch_size · grad_accum_steps · dp, global_batch // (mbs · dp)). The
check reads the source's syntax trees, so arithmetic inside f-strings counts and comments and
docstrings do not."""

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


PER_NODE = {"gpus_per_node", "world", "world_size", "nodes"}  # what a group takes a share of
LAYOUT_SIZES = DEGREES | {"model_parallel", "gradient_group", "stage_ranks", "expert_tp",
                          "expert_group", "expert_dp"}
BATCH = {"micro_batch_size", "mbs", "micro", "grad_accum_steps", "gas", "accum"}
DIVISIONS = (ast.FloorDiv, ast.Div, ast.Mod)


def _names(node: ast.AST) -> set:
    """What an operand is made of: its factors' names, through products, negations (the
    ceiling idiom -(-a // b)) and calls such as `expert_tp(config)`."""
    if isinstance(node, ast.UnaryOp):
        return _names(node.operand)
    if _is_product(node):
        return _names(node.left) | _names(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return {node.func.id}
    return {_factor(node)}


def hand_shares(root: Path) -> list[str]:
    """`path:line: expression` for each share of a node or the world taken by a layout size
    (either way round, or as min/max of the two), and each product of a micro-batch or
    accumulation count with dp, outside the layout object."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.relative_to(root) == THE_OBJECT:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.BinOp) and isinstance(node.op, DIVISIONS):
                    sides = _names(node.left), _names(node.right)
                    hand = any(a & PER_NODE and b & LAYOUT_SIZES for a, b in (sides, sides[::-1]))
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                      and node.func.id in ("min", "max")):
                    named = set().union(*(_names(a) for a in node.args)) if node.args else set()
                    hand = bool(named & PER_NODE and named & LAYOUT_SIZES)
                elif _is_product(node):
                    named = _names(node)
                    hand = "dp" in named and bool(named & BATCH)
                else:
                    continue
                if hand:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


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


def test_the_check_finds_each_way_a_share_or_a_batch_is_written(tmp_path):
    package = tmp_path / "orchestrator"
    package.mkdir()
    (package / "shares.py").write_text(
        'def f(c, gpus_per_node, world, mbs, dp, tp):\n'
        '    """gpus_per_node // tp in a docstring is prose"""\n'
        '    a = max(1, gpus_per_node // c.tp)  # world // tp in a comment is prose\n'
        '    b = -(-c.tp // gpus_per_node)\n'
        '    d = min(c.tp, gpus_per_node)\n'
        '    e = gpus_per_node // expert_tp(c)\n'
        '    g = world // c.dims.model_parallel\n'
        '    h = c.micro_batch_size * c.grad_accum_steps * c.dp\n'
        '    i = c.global_batch % (mbs * dp)\n'
        '    j = f"{world % (tp * 2)} left"\n'
        '    k = gpus_per_node // 2 + c.micro_batch_size * c.grad_accum_steps + world // nodes\n'
        '    return a, b, d, e, g, h, i, j, k\n')
    for folder in ("jobs", "dashboards"):
        (tmp_path / folder).mkdir()
    found = hand_shares(tmp_path)
    assert sorted({int(line.split(":")[1]) for line in found}) == [3, 4, 5, 6, 7, 8, 9, 10]


def test_no_module_takes_a_share_of_a_node_or_the_world_or_a_batch_by_hand():
    assert hand_shares(ROOT) == []


BEFORE = "2699ea7"  # the last commit before ParallelDims


def _has_commit(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0


def _tree_at(commit: str, tmp_path: Path) -> Path:
    """The checked packages as they were at `commit`."""
    archive = tmp_path / f"{commit}.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit, *PACKAGES],
                   check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / commit, filter="data")
    return tmp_path / commit


@pytest.mark.skipif(not _has_commit(BEFORE), reason="needs the repository's history")
def test_the_check_fails_on_the_tree_before_the_layout_object(tmp_path):
    """The commit before ParallelDims multiplied degrees in a dozen modules."""
    before = hand_products(_tree_at(BEFORE, tmp_path))
    assert any(line.startswith("orchestrator/space/config.py") and "self.tp * self.pp" in line
               for line in before)
    assert any(line.startswith("jobs/trainer.py") and "config.dp * config.cp" in line
               for line in before)
    assert len(before) > 20


BEFORE_SHARES = "e0fa81b"  # the last commit before ParallelDims split groups over nodes


@pytest.mark.skipif(not _has_commit(BEFORE_SHARES), reason="needs the repository's history")
def test_the_share_check_fails_on_the_tree_before_the_node_splits(tmp_path):
    """That commit divided gpus_per_node by tp in the DP and CP meshes and multiplied the
    global batch out in Layout, the job's config and five more places."""
    before = hand_shares(_tree_at(BEFORE_SHARES, tmp_path))
    assert "orchestrator/space/sharding.py:141: gpus_per_node // tp" in before
    assert "orchestrator/costmodel/context_parallel.py:48: gpus_per_node // config.tp" in before
    assert ("orchestrator/space/config.py:86: self.micro_batch_size * self.grad_accum_steps "
            "* self.dp") in before
    assert len(before) == 21
