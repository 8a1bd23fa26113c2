"""An MLflow SQLite store left half-made, set aside so that a fresh one is made from the journal.

MLflow makes its tables, then migrates them, the first time a store is opened. A full disk or
a kill part way leaves tables without the migration's record, or a migration half applied:
every later open fails the same way ("table webhooks already exists", "out-of-date database
schema"), and no retry mends it. Such a store holds tables but not this MLflow's schema
version. It is copied aside whole (`mlflow.db.broken-<time>`, for whoever wants to look) and
emptied in place, so that MLflow makes it anew and the campaign writes every finished trial of
its journal to it; emptied rather than moved, so that connections already open stay on the
store's file.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

SCHEMA_TABLE = "alembic_version"  # where MLflow's migrations record the schema's version


def sqlite_file(uri: str) -> Path | None:
    """The file of a SQLite store's URI; None for any other store."""
    path = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else None
    return Path(path) if path and path != ":memory:" else None


def is_half_made(path: Path) -> bool:
    """Whether the store holds tables but not the schema version this MLflow makes; False
    when SQLite cannot say (a store locked a while): that is an outage, retried."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    if not path.is_file():
        return False
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
            tables = {name for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
            version = (db.execute(f"SELECT version_num FROM {SCHEMA_TABLE}").fetchall()
                       if SCHEMA_TABLE in tables else [])
    except sqlite3.Error:
        return False
    return bool(tables) and version != [(_get_latest_schema_revision(),)]


def set_aside(path: Path) -> Path:
    """Copy the store to `<name>.broken-<time>` and empty it; the copy's path. An OSError or
    sqlite3.Error (a disk still full) leaves the store as it was and no copy behind."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.broken-{stamp}-{n}")
    try:
        with closing(sqlite3.connect(path, timeout=30)) as db:
            with closing(sqlite3.connect(aside)) as copy:
                db.backup(copy)
            objects = db.execute("SELECT type, name FROM sqlite_master WHERE type IN "
                                 "('view', 'trigger', 'table') AND name NOT LIKE 'sqlite_%'")
            for kind, name in sorted(objects.fetchall(), key=lambda o: o[0] == "table"):
                quoted = name.replace('"', '""')
                db.execute(f'DROP {kind.upper()} IF EXISTS "{quoted}"')
            db.commit()
    except (OSError, sqlite3.Error):
        aside.unlink(missing_ok=True)
        raise
    return aside
