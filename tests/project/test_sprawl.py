"""One concept per module, checked on the source rather than by a length to stay under.

A module holds two concepts when its definitions fall into groups that never refer to each
other and that other modules use apart: each group has callers of its own, and no module uses
two of them. That is a file a newcomer reads through for a thing that lives in half of it, and
that changes for two reasons; splitting it along the groups costs no caller anything. A long
module whose parts call each other is one concept, however long; a short one with two unrelated
halves is two. Groups of one function (a small rule beside its family, a constant and its
check) are not counted: moving those out makes files, not clarity.

And a function whose control flow has more independent paths than NIST SP 500-235 (McCabe's
structured testing) accepts with justification, 15, is several decisions in one body.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import mccabe
from test_architecture import ROOT, source_modules

# Modules that hold two groups of the kind above by design, with the reason.
TWO_CONCEPTS_BY_DESIGN = {
    "orchestrator.trainers.torchtitan.precision":
        "torchtitan's ConfigManager imports this module by name (--module) for the FP8 config "
        "functions its __getattr__ answers; the flags that name the module are kept with it",
}
MOST_PATHS = 15  # NIST SP 500-235, section 2.5: 10, or up to 15 with a reason


@dataclass
class Group:
    """Top-level definitions of one module that refer to each other, and who uses them."""
    names: set[str]
    callables: int  # functions and classes among them
    users: set[str] = field(default_factory=set)


def top_level_definitions(tree: ast.Module) -> dict[str, tuple[ast.AST, bool]]:
    """Name -> (its definition, whether it is a function or class)."""
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = (node, True)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = (node, False)
    return found


def connected_groups(tree: ast.Module) -> list[Group]:
    """The module's definitions split where none of one part refers to the other."""
    definitions = top_level_definitions(tree)
    parent = {name: name for name in definitions}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    for name, (node, _) in definitions.items():
        for used in ast.walk(node):
            if isinstance(used, ast.Name) and used.id in definitions:
                parent[root(used.id)] = root(name)
    members = defaultdict(set)
    for name in definitions:
        members[root(name)].add(name)
    return [Group(names, sum(definitions[n][1] for n in names)) for names in members.values()]


def _resolved(module: str, level: int, package: str) -> str:
    """The absolute name of `from <level dots><module> import ...` inside `package`."""
    if not level:
        return module
    anchor = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join(anchor + ([module] if module else []))


def name_users(modules: dict[str, Path]) -> dict[tuple[str, str], set[str]]:
    """(module, name) -> the other modules that use that name of it: `from m import name`,
    `m.name` after `import m` or `from package import m`, and through a package that
    re-exports it (`from package import name` where package/__init__.py imports it)."""
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    reexported = {}  # (package, name) -> module defining it
    for name, tree in trees.items():
        if modules[name].name == "__init__.py":
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    source = _resolved(node.module or "", node.level, name)
                    for alias in node.names:
                        reexported[(name, alias.asname or alias.name)] = (source, alias.name)
    users = defaultdict(set)
    for user, tree in trees.items():
        package = user if modules[user].name == "__init__.py" else user.rpartition(".")[0]
        module_aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolved(node.module or "", node.level, package)
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        module_aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                    else:
                        users[reexported.get((source, alias.name), (source, alias.name))].add(user)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        module_aliases[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in module_aliases:
                users[(module_aliases[node.value.id], node.attr)].add(user)
    return users


def separate_concepts(modules: dict[str, Path]) -> dict[str, list[set[str]]]:
    """Modules whose used definitions fall into two or more groups (of two or more functions
    or classes each) with no user in common: module -> the groups' names."""
    users = name_users(modules)
    found = {}
    for module, path in modules.items():
        concepts: list[Group] = []
        for group in connected_groups(ast.parse(path.read_text())):
            group.users = set().union(*(users.get((module, n), set()) for n in group.names))
            group.users.discard(module)
            if not group.users:
                continue
            for other in [c for c in concepts if c.users & group.users]:  # one user, one concept
                concepts.remove(other)
                group = Group(group.names | other.names, group.callables + other.callables,
                              group.users | other.users)
            concepts.append(group)
        sizeable = [c for c in concepts if c.callables >= 2]
        if len(sizeable) >= 2:
            found[module] = [c.names for c in sizeable]
    return found


def paths_per_function(path: Path, root: Path = ROOT) -> dict[str, int]:
    """McCabe's cyclomatic complexity of each function and method in the file."""
    visitor = mccabe.PathGraphingAstVisitor()
    visitor.preorder(ast.parse(path.read_text()), visitor)
    return {f"{path.relative_to(root)}:{graph.lineno} {graph.entity}": graph.complexity()
            for graph in visitor.graphs.values()}


SPRAWLING = '''
import json, math

def read_config(path):
    return _parsed(open(path).read())

def _parsed(text):
    return json.loads(text)

def distance(a, b):
    return math.sqrt(_squared(a, b))

def _squared(a, b):
    return sum((x - y) ** 2 for x, y in zip(a, b))
'''


def test_a_module_of_two_unrelated_halves_is_found(tmp_path):
    (tmp_path / "util.py").write_text(SPRAWLING)
    (tmp_path / "loader.py").write_text("from util import read_config\nread_config('x')\n")
    (tmp_path / "geometry.py").write_text("import util\nutil.distance((0,), (1,))\n")
    modules = {p.stem: p for p in tmp_path.glob("*.py")}
    assert separate_concepts(modules) == {
        "util": [{"read_config", "_parsed"}, {"distance", "_squared"}]}
    # One module using both halves makes them one concept to it, and so to the check.
    (tmp_path / "both.py").write_text("from util import distance, read_config\n")
    assert separate_concepts({p.stem: p for p in tmp_path.glob("*.py")}) == {}


def test_halves_that_refer_to_each_other_are_one_concept(tmp_path):
    (tmp_path / "util.py").write_text(SPRAWLING.replace("return json.loads(text)",
                                                        "return distance(json.loads(text), ())"))
    (tmp_path / "loader.py").write_text("from util import read_config\n")
    (tmp_path / "geometry.py").write_text("from util import distance\n")
    assert separate_concepts({p.stem: p for p in tmp_path.glob("*.py")}) == {}


def test_no_module_holds_two_concepts():
    found = {m: [sorted(names) for names in groups]
             for m, groups in separate_concepts(source_modules()).items()}
    assert set(found) - set(TWO_CONCEPTS_BY_DESIGN) == set(), \
        f"split each along its groups: {found}"
    assert set(TWO_CONCEPTS_BY_DESIGN) <= set(found), "one no longer needs its reason"


def test_the_path_count_is_mccabes(tmp_path):
    path = tmp_path / "branches.py"
    path.write_text("def f(x):\n    if x:\n        return 1\n    for i in x:\n        pass\n"
                    "    return 2\n")
    assert paths_per_function(path, tmp_path) == {"branches.py:1 f": 3}  # two decisions, + 1


def test_no_function_has_more_paths_than_structured_testing_accepts():
    branching = {f: n for path in source_modules().values()
                 for f, n in paths_per_function(path).items() if n > MOST_PATHS}
    assert branching == {}, "split the decisions it makes into functions of their own"
