"""`paratune trainers`: every trainer `trial.trainer` may name, as the registry holds them (the
built-in ones and any registered at run time), each with what its adapter declares and the
README.md of its folder, so that a trainer's documentation lives with its code and no list of
trainers is kept by hand."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.common import out, print_json
from orchestrator.cli.table_fit import fits, pair, print_records
from orchestrator.campaign_spec.trial import TrialSpec
from orchestrator.trainers.registry import DEFAULT, adapter_class, names, readers_of


def _docs(cls: type) -> str | None:
    """The README.md beside the adapter's module (its trainer's folder), if it has one: from
    the working directory where it lies below it (a checkout), else its whole path."""
    readme = Path(inspect.getfile(cls)).resolve().parent / "README.md"
    if not readme.is_file():
        return None
    here = Path.cwd().resolve()
    return str(readme.relative_to(here) if readme.is_relative_to(here) else readme)


def describe(name: str) -> dict:
    """What trainer `name`'s adapter declares: its `trial` keys (those its `trial_keys` name,
    and a spec section read for its name), launch-file formats, runtime and docs."""
    cls = adapter_class(name)
    keys = dict.fromkeys((*cls.trial_keys, *TrialSpec.model_fields))
    return {
        "name": name,
        "default": name == DEFAULT,
        "adapter": f"{cls.__module__}:{cls.__qualname__}",
        "tool": getattr(cls, "tool", None),
        "trial_keys": [key for key in keys if name in readers_of(key)],
        "export_formats": list(cls.export_formats),
        "runtime_name": cls.runtime_name,
        "runs_a_program": cls.runs_a_program,
        "docs": _docs(cls),
    }


# (column, the field it shows as plain text); the release each was written for is in --json.
COLUMNS = (
    ("trial keys", lambda t: ",".join(f"trial.{k}" for k in t["trial_keys"]) or "-"),
    ("formats", lambda t: ",".join(t["export_formats"])),
    ("runtime", lambda t: t["runtime_name"] or "-"),
    ("program", lambda t: "yours" if t["runs_a_program"] else "ParaTune's"),
    ("docs", lambda t: t["docs"] or "-"),
)


def _title(t: dict) -> str:
    return t["name"] + (" (default)" if t["default"] else "")


def trainers(
    as_json: bool = typer.Option(False, "--json", help='print {"trainers": [...]}'),
) -> None:
    """The registered trainers: each one's `trial` keys, launch-file formats (its default
    first), the name `trial.runtime` gives its runtime, whether its trials run your program or
    ParaTune's own job, and the README.md of its folder (--json: also the release it was
    written for and its adapter class)."""
    found = [describe(name) for name in names()]
    if as_json:
        print_json({"trainers": found})
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0))
    for header in ("trainer", *(column for column, _ in COLUMNS)):
        table.add_column(header, no_wrap=True)
    for t in found:
        table.add_row(*(escape(text) for text in (_title(t), *(cell(t) for _, cell in COLUMNS))))
    if fits(out, table):
        out.print(table)
    else:
        print_records(out, [(_title(t), [pair(column, cell(t)) for column, cell in COLUMNS])
                            for t in found])
