"""One service per database, whatever its state directory.

Two services on one database would each adopt every running campaign and start a controller
for it in their own runs directory, so each campaign would run twice. The second one must
stop before it touches anything, as on a shared state directory (state_lock.py). The lock
goes away with its holder, SIGKILL included, so a crashed service never blocks its restart:
- SQLite: an flock on `<database file>.server-lock` beside the database (orchestrator/common/locks.py);
  a SQLite database is a file, and only processes on its machine can open it safely.
- PostgreSQL: a session advisory lock held on one connection for the service's life, which
  PostgreSQL releases when that connection ends. The connection carries the holder's PID and
  host as its `application_name`, so a second service is told who holds the lock.
A database in memory is no one else's, and needs no lock.

A PostgreSQL that restarts under a running service ends the lock's session too, so the
service checks its lock (`held`) and takes it again; if another service took it meanwhile,
the campaigns are that one's now, and this one stops (server/supervisor.py).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import NullPool

from orchestrator.common.errors import UserError
from orchestrator.common.locks import HolderLock

# pg_try_advisory_lock's key: "PTSV", ParaTune's service, within the database's own locks.
ADVISORY_KEY = 0x50545356
APPLICATION = "paratune server"
_HOLDER = text(
    "SELECT a.application_name, a.client_addr FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = :key "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def _refusal(shown_url: str, holder: str) -> UserError:
    return UserError(f"--database {shown_url}: another paratune server ({holder}) serves this "
                     "database; stop that server first, or give this one its own --database")


class DatabaseLock:
    """Held from `acquire` to `release` (or a `with` block); a second taker gets a UserError."""

    def __init__(self, url: str):
        self.url = make_url(url)
        self.shown_url = self.url.render_as_string(hide_password=True)
        self._file_lock: HolderLock | None = None
        self._connection: Connection | None = None

    def acquire(self) -> None:
        if self.url.get_backend_name() == "sqlite":
            self._lock_file()
        elif self.url.get_backend_name() == "postgresql":
            self._lock_postgresql()

    def _lock_file(self) -> None:
        database = self.url.database
        if not database or database == ":memory:" or database.startswith("file::memory:"):
            return
        path = Path(database).resolve().with_name(Path(database).name + ".server-lock")
        self._file_lock = HolderLock(path, lambda holder: _refusal(
            self.shown_url, f"PID {holder.get('pid', '?')} on {holder.get('host', '?')}, "
            f"lock {path}"))
        self._file_lock.acquire()

    def _lock_postgresql(self) -> None:
        engine = create_engine(self.url, poolclass=NullPool)
        connection = engine.connect()
        try:
            me = f"{APPLICATION} PID {os.getpid()} on {socket.gethostname()}"
            connection.execute(text("SELECT set_config('application_name', :me, false)"),
                               {"me": me[:63]})  # PostgreSQL keeps 63 bytes of a name
            taken = connection.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                       {"key": ADVISORY_KEY}).scalar()
            connection.commit()
            if not taken:
                row = connection.execute(_HOLDER, {"key": ADVISORY_KEY}).first()
                connection.rollback()
                holder = (f"{row[0] or 'a client'}"
                          f"{f', connected from {row[1]}' if row and row[1] else ''}"
                          if row else "a session that holds its lock")
                raise _refusal(self.shown_url, holder)
        except BaseException:
            connection.close()
            engine.dispose()
            raise
        self._connection = connection

    def held(self) -> bool:
        """Whether this service still holds the lock: True unless its PostgreSQL session
        ended and another service has taken the lock since (then False); a database that
        cannot be reached just now takes nothing from anyone, so that is True too."""
        if self.url.get_backend_name() != "postgresql":
            return True
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT 1")).scalar()
                self._connection.rollback()
                return True
            except Exception:  # the session is gone: take the lock again on a new one
                self._drop_connection()
        try:
            self._lock_postgresql()
        except UserError:
            return False
        except Exception:
            return True
        return True

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            engine = connection.engine
            try:
                connection.close()
            except Exception:
                pass
            engine.dispose()

    def release(self) -> None:
        if self._file_lock is not None:
            self._file_lock.release()
            self._file_lock = None
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT pg_advisory_unlock(:key)"),
                                         {"key": ADVISORY_KEY})
                self._connection.commit()
            except Exception:
                pass
            finally:  # closing the session releases the lock in any case
                self._drop_connection()

    def __enter__(self) -> "DatabaseLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
