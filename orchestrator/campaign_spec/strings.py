"""Rules for the text a spec carries into launch files and trial processes: no line breaks or
other control characters anywhere, campaign names as a pattern, environment names as shell
identifiers, #SBATCH values as one word."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.common.errors import SpecError, UserError, excerpt

# A campaign's name is a directory under the runs directory: no path separators, no leading dot.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_MAX = 100
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SBATCH_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
SBATCH_VALUE = re.compile(r"[^\s\"'\\#]+")


def bad_character(text: str) -> str | None:
    """The first character of `text` a launch file cannot hold on one line: control characters,
    line and paragraph separators, lone surrogates (tab and plain spaces are fine)."""
    for char in text:
        if char != "\t" and not char.isprintable():
            return char
    return None


def check_strings(data: Any, source: str, path: str = "") -> None:
    """Refuse control characters and line breaks in every key and string of a raw spec."""
    stack: list[tuple[str, Any]] = [(path, data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str):
                    _check_one(f"{where}.{key}" if where else key, key, source, "key")
                stack.append((f"{where}.{excerpt(key, 40, quote=False)}" if where
                              else excerpt(key, 40, quote=False), item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_one(where, value, source, "value")


def _check_one(where: str, text: str, source: str, what: str) -> None:
    char = bad_character(text)
    if char is not None:
        shown = excerpt(where, 60, quote=False) or "(top level)"
        raise SpecError(f"{source}: {shown}: the {what} holds the control character "
                        f"U+{ord(char):04X} ({excerpt(text, 40)}); write it on one line "
                        "without control characters")


def check_campaign_name(name: str, where: str = "campaign") -> str:
    """A campaign name given on the command line (or as search.warm_start), checked like the
    spec's `name`, so it never reaches outside the runs directory."""
    if not isinstance(name, str) or len(name) > NAME_MAX or not re.match(NAME_PATTERN, name):
        raise UserError(f"{where}: {excerpt(name, 60)} is not a campaign name; use letters, "
                        f"digits, '_', '.' and '-' (pattern {NAME_PATTERN}, at most {NAME_MAX})")
    return name


def check_env_name(name: str) -> str:
    if not ENV_NAME.fullmatch(name):
        raise ValueError(f"{excerpt(name, 40)} is not an environment variable name; use "
                         "letters, digits and '_', not starting with a digit")
    return name


def check_sbatch_value(key: str, value: str) -> str:
    if not SBATCH_VALUE.fullmatch(value):
        raise ValueError(f"{key}: {excerpt(value, 40)} is not one #SBATCH word; drop spaces, "
                         "quotes, backslashes and '#'")
    return value
