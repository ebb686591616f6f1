"""SQLite capture installed once per DBAPI connection and table set, gated per session (issue 16)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool, StaticPool

from guard.sql_backend import SqlBackend
from guard.sqlite_capture import LOG
from tests.support.guardcore import keyed_table, text_column

metadata = sa.MetaData()
notes = keyed_table("notes", metadata, text_column("body"))
tags = keyed_table("tags", metadata, text_column("label"))
# The same table name as ``notes`` with another definition, as a second application might declare it.
notes_other = keyed_table("notes", sa.MetaData())


@pytest.fixture
def engine() -> Iterator[sa.Engine]:
    engine = sa.create_engine("sqlite://", poolclass=StaticPool)
    with engine.begin() as conn:
        metadata.create_all(conn)
    yield engine
    engine.dispose()


def temp_objects(conn: sa.Connection) -> set[str]:
    return {str(r[0]) for r in conn.exec_driver_sql("SELECT name FROM sqlite_temp_master")}


def statements(conn: sa.Connection) -> list[str]:
    """Records the SQL the DBAPI connection runs from now on (triggers' inner statements excluded)."""
    seen: list[str] = []
    raw = conn.connection.dbapi_connection
    assert isinstance(raw, sqlite3.Connection)
    raw.set_trace_callback(seen.append)
    return seen


def logged(conn: sa.Connection) -> int:
    return int(conn.exec_driver_sql(f"SELECT COUNT(*) FROM temp.{LOG}").scalar_one())


def test_triggers_are_installed_once_per_connection(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        first = SqlBackend(conn, [notes, tags])
        first.begin()
        first.commit()
        installed = temp_objects(conn)
        assert LOG in installed and sum(name.startswith("sg_") for name in installed) == 6
        seen = statements(conn)
        second = SqlBackend(conn, [notes, tags])
        second.begin()
        conn.execute(notes.insert(), {"id": 1, "body": "a"})
        assert [c.key for c in second.changes().changes] == ["1"]
        second.commit()
        assert not [s for s in seen if "CREATE" in s.upper() or "DROP" in s.upper()]
        assert temp_objects(conn) == installed


def test_nothing_is_logged_outside_a_session(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        backend = SqlBackend(conn, [notes])
        backend.begin()
        backend.rollback()
        conn.execute(notes.insert(), {"id": 1, "body": "setup"})
        conn.commit()
        assert logged(conn) == 0
        session = SqlBackend(conn, [notes])
        session.begin()
        conn.execute(notes.update().values(body="changed"))
        assert [(c.op, c.key) for c in session.changes().changes] == [("update", "1")]
        session.commit()
        assert logged(conn) == 0
        conn.execute(notes.delete())
        conn.commit()
        assert logged(conn) == 0


def test_a_new_dbapi_connection_gets_the_triggers_again() -> None:
    url = "sqlite:///file:sgcapture?mode=memory&cache=shared&uri=true"
    engine = sa.create_engine(url, poolclass=NullPool)
    keep = engine.connect()  # keeps the shared in-memory database alive between connections
    try:
        metadata.create_all(keep)
        keep.commit()
        for i in range(2):
            with engine.connect() as conn:
                backend = SqlBackend(conn, [notes])
                backend.begin()
                conn.execute(notes.insert(), {"id": i, "body": "x"})
                assert [c.key for c in backend.changes().changes] == [str(i)]
                backend.commit()
    finally:
        keep.close()
        engine.dispose()


def test_ddl_undone_by_the_callers_rollback_is_installed_again(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        conn.execute(notes.insert(), {"id": 1, "body": "in the caller's transaction"})
        backend = SqlBackend(conn, [notes])
        backend.begin()
        backend.commit()
        conn.rollback()
        assert not any(name.startswith("sg_") for name in temp_objects(conn))
        again = SqlBackend(conn, [notes])
        again.begin()
        conn.execute(notes.insert(), {"id": 2, "body": "y"})
        assert [c.key for c in again.changes().changes] == ["2"]
        again.rollback()


def test_two_table_sets_on_one_connection_each_log_their_own(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        wide = SqlBackend(conn, [notes, tags])
        wide.begin()
        wide.commit()
        narrow = SqlBackend(conn, [notes])
        narrow.begin()
        conn.execute(tags.insert(), {"id": 1, "label": "not watched"})
        conn.execute(notes.insert(), {"id": 1, "body": "watched"})
        assert [(c.table, c.key) for c in narrow.changes().changes] == [("notes", "1")]
        narrow.commit()
        other = SqlBackend(conn, [notes_other])
        other.begin()
        conn.execute(notes.update().values(body="changed"))
        # Only the triggers of ``notes_other``'s definition log: one image per change, of its columns.
        assert [(c.op, c.before, c.after) for c in other.changes().changes] == [
            ("update", {"id": 1}, {"id": 1})
        ]
        other.rollback()


def test_a_check_query_cannot_write(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        backend = SqlBackend(conn, [notes])
        backend.begin()
        with pytest.raises(Exception, match="SELECT"):
            backend.query("DELETE FROM notes")
        raw = conn.connection.dbapi_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.create_function("sneaky", 0, lambda: raw.execute("DELETE FROM notes").rowcount)
        conn.execute(notes.insert(), {"id": 1, "body": "x"})
        with pytest.raises(sa.exc.DBAPIError):
            backend.query("SELECT sneaky() AS n")
        assert conn.execute(sa.select(notes.c.id)).scalars().all() == [1]
        conn.execute(notes.insert(), {"id": 2, "body": "the session still writes"})
        assert len(backend.changes()) == 2
        backend.rollback()
