"""docs/costmodel.md's "Constants" and "Published figures" tables, rendered from the registry.

`.venv/bin/python -m orchestrator.costmodel.provenance_tables` prints them; with `--write
docs/costmodel.md` it rewrites the doc's blocks between `<!-- BEGIN name -->` and
`<!-- END name -->`, which tests/costmodel/test_constants_provenance.py keeps equal to the rendering.
"""

from __future__ import annotations

from orchestrator.costmodel.constants_provenance import (
    ASSUMPTION,
    CHECK,
    CONSTANTS,
    FIT,
    FIT_ROLE,
    MISS,
    SOURCE,
    fitted_by,
    resting_on,
    role,
)
from orchestrator.costmodel.published_figures import FIGURES


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def constants_table() -> str:
    """The docs' "Constants" table: one row per constant, its value as the code holds it."""
    lines = [_row(["constant", "where", "value", "kind", "source, fit or what it moves"]),
             "|---|---|---|---|---|"]
    for c in CONSTANTS:
        basis = c.basis
        if c.fitted_to:
            basis += "; fitted to " + ", ".join(f"`{f}`" for f in c.fitted_to)
        if c.fitted_to_rows:
            basis += "; fitted to " + c.fitted_to_rows
        if c.moves:
            basis += "; moves " + ", ".join(f"`{f}`" for f in c.moves)
        lines.append(_row([f"`{c.name}`", c.where, _shown(c.value), c.kind, basis]))
    return "\n".join(lines)


def figures_table() -> str:
    """The docs' "Published figures" table: each figure's id, peak and role."""
    lines = [_row(["id", "figure", "published", "peak", "role", "rests on"]),
             "|---|---|---|---|---|---|"]
    for f in FIGURES:
        fitted = fitted_by(f.id)
        what = role(f.id) + (f" ({', '.join(fitted)})" if fitted else "")
        if f.miss:
            what += f": {f.miss}"
        lines.append(_row([f"`{f.id}`", f.what, f.published, f.peak or "—", what,
                           ", ".join(f"`{n}`" for n in resting_on(f.id)) or "—"]))
    return "\n".join(lines)


def counts() -> dict[str, int]:
    """How many constants of each kind, and how many figures in each role."""
    kinds = [c.kind for c in CONSTANTS] + [role(f.id) for f in FIGURES]
    return {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}


def summary() -> str:
    n = counts()
    return (f"{len(CONSTANTS)} constants: {n.get(SOURCE, 0)} sources, {n.get(FIT, 0)} fits, "
            f"{n.get(ASSUMPTION, 0)} assumptions. {len(FIGURES)} published figures: "
            f"{n.get(CHECK, 0)} checks, {n.get(MISS, 0)} documented misses, "
            f"{n.get(FIT_ROLE, 0)} fits, not checks.")


def doc_blocks() -> dict[str, str]:
    """What docs/costmodel.md holds between `<!-- BEGIN name -->` and `<!-- END name -->`."""
    return {"constants_table": constants_table(),
            "figures_table": figures_table() + "\n\n" + summary()}


def with_blocks(text: str) -> str:
    """`text` with each block replaced by its rendering from the registry."""
    for name, block in doc_blocks().items():
        begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{block}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> None:
    """Print the tables, or with --write DOC rewrite their blocks in DOC."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="DOC", help="e.g. docs/costmodel.md")
    args = parser.parse_args(argv)
    if args.write:
        path = Path(args.write)
        path.write_text(with_blocks(path.read_text()))
    else:
        print(*doc_blocks().values(), sep="\n\n")


if __name__ == "__main__":
    main()
