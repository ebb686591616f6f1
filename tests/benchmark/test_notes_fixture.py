"""The notes fixture's call scope (benchmark/fixtures/notes_server.py): inside the session's transaction
a tool call runs in a savepoint of its own, so a tool that fails after writing leaves nothing, neither
rows nor logged changes, and the transaction goes on; outside one, a call commits or leaves nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from benchmark.fixtures.notes_server import SEED, ToolFailed, call_scope, create_engine, notes, run_tool
from guard.sql_backend import SqlBackend
from tests.support.guardcore import postgresql_schema
from tests.support.services import pg_engine_url, require_postgres

Connect = Callable[[], AbstractContextManager[sa.Connection]]


@pytest.fixture(params=["sqlite", "postgresql"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    """A connection to a seeded notes database: the fixture's own SQLite engine, or a throwaway
    PostgreSQL schema."""
    if request.param == "sqlite":
        engine = create_engine(tmp_path / "notes.db")
        yield engine.connect
        engine.dispose()
        return
    require_postgres()
    engine = sa.create_engine(pg_engine_url(), poolclass=NullPool)

    def seeded(conn: sa.Connection) -> None:
        notes.create(conn)
        conn.execute(notes.insert(), SEED)

    def in_schema() -> AbstractContextManager[sa.Connection]:
        return postgresql_schema(engine, seeded, prefix="sg_notes")

    yield in_schema
    engine.dispose()


def ids(conn: sa.Connection) -> list[str]:
    return list(conn.execute(sa.select(notes.c.id).order_by(notes.c.id)).scalars())


def test_a_tool_that_fails_in_a_transaction_leaves_nothing(connect: Connect) -> None:
    with connect() as conn:
        backend = SqlBackend(conn, [notes])
        backend.begin()
        kept = backend.savepoint()
        position = backend.position()
        with pytest.raises(ToolFailed), call_scope(conn):
            run_tool(conn, "put_note", {"id": "n3", "body": "written, then the tool fails"})
            run_tool(conn, "delete_note", {"id": "n1"})
            raise ToolFailed("after writing")
        assert ids(conn) == ["n1", "n2"]
        assert not backend.changes_after(position)
        with call_scope(conn):
            run_tool(conn, "put_note", {"id": "n4", "body": "kept"})
        assert [(c.key, c.op) for c in backend.changes(kept)] == [("n4", "insert")]
        backend.release(kept)  # the session's savepoints are untouched by the calls' own
        assert [c.key for c in backend.changes()] == ["n4"]
        backend.rollback()
        assert not conn.in_transaction()
        with conn.begin():
            assert "n4" not in ids(conn)


def test_outside_a_transaction_a_call_commits_or_leaves_nothing(connect: Connect) -> None:
    with connect() as conn:
        before = [*ids(conn)]
        conn.rollback()
        with pytest.raises(ToolFailed), call_scope(conn):
            run_tool(conn, "put_note", {"id": "n3", "body": "written, then the tool fails"})
            raise ToolFailed("after writing")
        assert not conn.in_transaction()
        with call_scope(conn):
            run_tool(conn, "put_note", {"id": "n4", "body": "kept"})
        assert not conn.in_transaction()
        with conn.begin():
            assert ids(conn) == sorted([*before, "n4"])
