"""The `database_url` fixture: each backend the campaign service stores its state in, for real.

SQLite always; PostgreSQL when `make test` started one as root (or $PARATUNE_TEST_POSTGRES_URL
names a server), else skipped with the reason.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    insert,
    inspect,
    select,
    text,
)


def _installed_postgres_majors() -> list[int]:
    """The PostgreSQL versions the distribution's packages put here (Debian 12: [15])."""
    versions = (p.parent.parent.name for p in Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return sorted(int(v) for v in versions if v.isdigit())


def test_database_url_is_empty_and_shared_between_connections(database_url):
    engine = create_engine(database_url)
    try:
        metadata = MetaData()
        probes = Table("probes", metadata, Column("id", Integer, primary_key=True),
                       Column("name", String(50), nullable=False))
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []  # a database of its own
        metadata.create_all(engine)
        with engine.connect() as writer, engine.connect() as reader:
            assert writer.connection.dbapi_connection is not reader.connection.dbapi_connection
            writer.execute(insert(probes), [{"name": "first"}, {"name": "second"}])
            writer.commit()
            names = reader.execute(select(probes.c.name).order_by(probes.c.id)).scalars().all()
            assert names == ["first", "second"]
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                version = conn.execute(text("SHOW server_version")).scalar_one()
            major = int(version.split(".")[0])
            # The server `make test` starts is the distribution's own, the newest installed
            # (Debian 12: 15); any server the fixture uses needs 13+ for DROP ... WITH (FORCE).
            installed = _installed_postgres_majors()
            if installed and engine.url.host in ("127.0.0.1", "localhost"):
                assert major == installed[-1], version
            assert major >= 13, version
        else:
            assert engine.dialect.name == "sqlite"
    finally:
        engine.dispose()
