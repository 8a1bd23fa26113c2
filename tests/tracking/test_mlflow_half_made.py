"""An MLflow store left half-made (its tables created or migrated part way, as a full disk
leaves it) is set aside, not retried for ever: `resume` says so in one line, moves the file to
`mlflow.db.broken-<time>`, and writes every finished trial of the journal to a fresh store."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import pytest
from conftest import run_cli_process, write_spec
from test_mlflow_store_trouble import runs_by_kind

TRIALS = 3


def half_made(store, how: str) -> None:
    """The store as an interrupted set-up leaves it (changed in place: this process's MLflow
    keeps the file open)."""
    with closing(sqlite3.connect(store)) as db:
        if how == "no schema version":  # every table made, the migration's record not yet
            db.execute("DROP TABLE alembic_version")
        else:  # made anew, cut after the first migration's table
            tables = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                               "'table' AND name NOT LIKE 'sqlite_%'")]
            for name in tables:
                db.execute(f'DROP TABLE "{name}"')
            db.execute("CREATE TABLE webhooks (webhook_id VARCHAR(256) PRIMARY KEY)")
        db.commit()


def resume(name: str) -> tuple[int, str]:
    """`paratune resume` as its own process: MLflow opens the store afresh, as a controller
    started after the fault does."""
    done = run_cli_process("resume", name, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("how", ["no schema version", "cut while creating"])
def test_a_half_made_store_is_set_aside_and_rebuilt_from_the_journal(tmp_path, runs_dir, cli,
                                                                    how):
    spec = write_spec(tmp_path / "h.yaml", name="half", budget={"max_trials": TRIALS},
                      backend={"kind": "simulated"})
    assert cli("run", str(spec))[0] == 0
    store = runs_dir / "mlflow.db"
    half_made(store, how)

    code, said = resume("half")
    assert code == 0 and "Traceback" not in said, said
    told = [line for line in said.splitlines() if "half-made" in line]
    aside = list(runs_dir.glob("mlflow.db.broken-*"))
    assert len(told) == 1 and len(aside) == 1 and str(aside[0]) in told[0], said
    assert "not in MLflow yet" not in said and "lost campaign" not in said, said

    kinds = runs_by_kind(runs_dir, "half")
    assert sum(kinds["campaign"].values()) == 1, kinds
    assert len(kinds["trial"]) == TRIALS and set(kinds["trial"].values()) == {1}, kinds
    assert json.loads(cli("status", "half", "--json")[1])["mlflow"]["not_in_mlflow"] == 0

    code, said = resume("half")  # the fresh store is sound: nothing more is set aside
    assert code == 0 and "half-made" not in said and "not in MLflow yet" not in said, said
    assert len(list(runs_dir.glob("mlflow.db.broken-*"))) == 1
