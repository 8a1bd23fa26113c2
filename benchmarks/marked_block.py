"""A doc page's generated block: the text between `<!-- BEGIN name -->` and `<!-- END name -->`
that a benchmark rewrites with its tables, leaving the prose around it as written.

A page without the markers gets the block appended at its end.
"""

from __future__ import annotations

from pathlib import Path


def with_marked_block(page: str, name: str, block: str) -> str:
    """The page with the block between its `name` markers replaced by `block`."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    head, _, rest = page.partition(begin)
    tail = rest.partition(end)[2]
    return f"{head}{begin}\n{block}{end}{tail}"


def write_marked_block(path: Path, name: str, block: str) -> None:
    path.write_text(with_marked_block(path.read_text(), name, block))
