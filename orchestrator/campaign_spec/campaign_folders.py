"""The campaigns saved under a runs directory (a folder holding its spec.yaml), and the names
of them a mistyped or cut-short name may have meant, for the one-line "no campaign" error."""

from __future__ import annotations

import difflib
from pathlib import Path

SPEC_FILE = "spec.yaml"  # a campaign's resolved spec, saved in its directory
SUGGESTED_AT_MOST = 3  # names a "did you mean" offers


def saved_campaigns(runs_dir: Path) -> list[str]:
    """The names of the campaigns under `runs_dir`, sorted; none when it is not a folder."""
    try:
        return sorted(p.name for p in Path(runs_dir).iterdir() if (p / SPEC_FILE).is_file())
    except OSError:
        return []


def starting_with(prefix: str, names: list[str]) -> list[str]:
    """The names that `prefix` starts (`quickstart` for the demo's `quickstart-<date-time>`)."""
    return [n for n in names if n.startswith(prefix) and n != prefix]


def did_you_mean(name: str, runs_dir: Path) -> str:
    """"; did you mean: X, Y" with the campaigns `name` starts and those spelled like it
    (difflib), or "" when none is close."""
    names = saved_campaigns(runs_dir)
    close = difflib.get_close_matches(name, names, n=SUGGESTED_AT_MOST)
    found = list(dict.fromkeys([*close, *starting_with(name, names)]))[:SUGGESTED_AT_MOST]
    return f"; did you mean: {', '.join(found)}" if found else ""
