"""Trainers are plugins: no stage branches on a trainer's name, and a trainer's name is written
only in its own folder and the registry, so a trainer added or removed is one folder and one
registry line. Read from the source (strings as the parser sees them, not comments)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "orchestrator" / "trainers"
REGISTRY = TRAINERS / "registry.py"
FOLDER = {"megatron-lm": "megatron", "megatron-deepspeed": "megatron",
          "torchtitan": "torchtitan", "megatron-bridge": "megatron_bridge"}
# Where a trainer's name is another thing's name, and why it stays there.
ELSEWHERE = {
    # Published measurements name the framework they ran (torchtitan's paper rows): the cost
    # model prices that framework, and it imports no adapter.
    "orchestrator/costmodel/published_rows.py": {"torchtitan"},
    "orchestrator/costmodel/published_names.py": {"torchtitan"},
    "orchestrator/costmodel/published_layout.py": {"torchtitan"},
    # Megatron-Bridge shares Megatron-LM's Megatron-Core rules and names whose they are.
    "orchestrator/trainers/megatron_bridge/capabilities.py": {"megatron-lm"},
}


def sources() -> list[Path]:
    return sorted([*(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")])


def strings(node: ast.AST) -> list[str]:
    """The string constants `node` is, or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for item in node.elts for s in strings(item)]
    return []


def names_trainer(node: ast.AST) -> bool:
    """`trainer`, `spec.trial.trainer`, `trial.get("trainer")`, `trainer or ...` (not
    `trainers`, `trainer_for(spec)...`)."""
    return re.search(r"\btrainer\b", ast.unparse(node)) is not None


def trainer_branches(tree: ast.AST) -> list[int]:
    """Lines comparing something named trainer with == / != / in / not in to literal names."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_trainer(s) for s in sides) and any(strings(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_the_branch_finder_finds_a_branch():
    found = trainer_branches(ast.parse('if spec.trial.trainer == "x" or trainer in ("a", "b"):'
                                       '\n    pass\nif fmt == "y": pass'))
    assert found == [1, 1]


def test_no_stage_branches_on_a_trainers_name():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sources() if path != REGISTRY
             for line in trainer_branches(ast.parse(path.read_text()))]
    assert found == []


def test_a_trainers_name_is_written_only_in_its_folder_and_the_registry():
    found = []
    for path in sources():
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and node.value in FOLDER):
                continue
            own = path.is_relative_to(TRAINERS / FOLDER[node.value]) or path == REGISTRY
            if not own and node.value not in ELSEWHERE.get(relative, set()):
                found.append(f"{relative}:{node.lineno}: {node.value!r}")
    assert found == []
