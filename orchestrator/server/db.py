"""The service's state, through SQLAlchemy: SQLite by default, PostgreSQL by URL.

Everything the service must remember across its own restarts lives here: users and their hashed
tokens, every campaign with its queue position and controller process, the trial slots each
campaign holds, and GPU-hour quotas. Trial results do not: they stay in each campaign's journal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Boolean, Float, Integer, String, Text, create_engine, event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from orchestrator.campaign_spec.strings import NAME_MAX

QUEUED, RUNNING, FINISHED, FAILED, CANCELLED = "queued", "running", "finished", "failed", "cancelled"
FINAL_STATES = (FINISHED, FAILED, CANCELLED)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)


class Token(Base):
    __tablename__ = "tokens"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex
    user: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class Campaign(Base):
    __tablename__ = "campaigns"
    name: Mapped[str] = mapped_column(String(NAME_MAX), primary_key=True)  # as a spec allows
    owner: Mapped[str] = mapped_column(String(64), index=True)
    project: Mapped[str | None] = mapped_column(String(64), index=True, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16), default=QUEUED, index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    spec_yaml: Mapped[str] = mapped_column(Text)
    submitted_at: Mapped[float] = mapped_column(Float, default=time.time)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_trials: Mapped[int] = mapped_column(Integer, default=0)
    max_concurrent: Mapped[int] = mapped_column(Integer, default=1)
    gpu_hours_budget: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The controller child: its PID and kernel start time (a PID alone can be reused).
    controller_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    controller_start: Mapped[int | None] = mapped_column(Integer, nullable=True)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    next_start_at: Mapped[float] = mapped_column(Float, default=0.0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    slot_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    held_slots: Mapped[int] = mapped_column(Integer, default=0)
    waiting_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    asked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A rehearsal on the simulated backend: it spends no GPU, so no quota counts it.
    simulated: Mapped[bool | None] = mapped_column(Boolean, default=False, nullable=True)


class Quota(Base):
    __tablename__ = "quotas"
    scope: Mapped[str] = mapped_column(String(16), primary_key=True)  # user | project
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_hours: Mapped[float] = mapped_column(Float)


class CodeGrant(Base):
    """Who may run programs of their own on the service (`trial.command`, trainer scripts,
    their own tracking store, files named in `model:`/`cluster:`): a user, or every member of
    a project."""

    __tablename__ = "code_grants"
    scope: Mapped[str] = mapped_column(String(16), primary_key=True)  # user | project
    name: Mapped[str] = mapped_column(String(64), primary_key=True)


class ProjectMember(Base):
    """A user of a project: sees its campaigns, and shares its code grant and quota."""

    __tablename__ = "project_members"
    project: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True)


class Database:
    """One engine and its sessions; tables are created on first use, and a database an older
    service made is brought up to these tables (see `_widen_campaign_names`)."""

    def __init__(self, url: str):
        self.url = url
        self.engine: Engine = create_engine(url, pool_pre_ping=True, **_engine_options(url))
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)
        _widen_campaign_names(self.engine)
        _add_simulated_column(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed when the block ends, rolled back when it raises."""
        with self._sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def _widen_campaign_names(engine: Engine) -> None:
    """Services before this one made `campaigns.name` VARCHAR(64), shorter than a spec's name
    may be; PostgreSQL holds a column to its length (SQLite does not), so widen it in place."""
    if engine.dialect.name != "postgresql":
        return
    columns = {c["name"]: c["type"] for c in inspect(engine).get_columns("campaigns")}
    length = getattr(columns.get("name"), "length", None)
    if length is not None and length < NAME_MAX:
        with engine.begin() as connection:
            connection.execute(text(
                f"ALTER TABLE campaigns ALTER COLUMN name TYPE VARCHAR({NAME_MAX})"))


def _add_simulated_column(engine: Engine) -> None:
    """Services before this one had no `campaigns.simulated`; add it (NULL reads as not
    simulated), on SQLite and PostgreSQL alike."""
    columns = {c["name"] for c in inspect(engine).get_columns("campaigns")}
    if "simulated" not in columns:
        with engine.begin() as connection:
            connection.execute(text("ALTER TABLE campaigns ADD COLUMN simulated BOOLEAN"))


def _engine_options(url: str) -> dict:
    if url.startswith("sqlite"):
        # The API answers from a thread pool; SQLite's own locking keeps writes serial.
        return {"connect_args": {"check_same_thread": False, "timeout": 30}}
    return {"pool_size": 10, "max_overflow": 20}


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cursor.execute("PRAGMA synchronous=FULL")  # a SIGKILLed server loses no commit
    cursor.close()
