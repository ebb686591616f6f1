"""A SqlBackend's savepoints on SQLite are plain SQL on the DBAPI connection (issue 18), nested in the
session's own nested transaction, which SQLAlchemy keeps: a tool's own ``begin_nested`` inside one still
nests, commits and rolls back with it, and SQLAlchemy's view of the connection stays true."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from guard.sql_backend import SqlBackend
from tests.support.guardcore import keyed_table, sqlite_memory, text_column

metadata = sa.MetaData()
items = keyed_table("items", metadata, text_column("name"), key=sa.Text)


@pytest.fixture
def conn() -> Iterator[sa.Connection]:
    with sqlite_memory(metadata) as connection:  # the plain engine a user creates
        yield connection


def names(conn: sa.Connection) -> list[str]:
    return list(conn.execute(sa.select(items.c.name).order_by(items.c.name)).scalars())


def tool(conn: sa.Connection, name: str) -> None:
    """A tool that writes in a nested transaction of its own, as the benchmark's environments do."""
    with conn.begin_nested():
        conn.execute(items.insert().values(id=name, name=name))


def test_a_tools_own_nested_transaction_rolls_back_with_the_savepoint_around_it(conn: sa.Connection) -> None:
    backend = SqlBackend(conn, [items])
    backend.begin()
    kept = backend.savepoint()
    tool(conn, "a")
    backend.release(kept)
    undone = backend.savepoint()
    tool(conn, "b")
    assert {c.key for c in backend.changes(undone)} == {"b"}

    backend.rollback_to(undone)

    assert names(conn) == ["a"]
    assert {c.key for c in backend.changes()} == {"a"}
    assert conn.in_nested_transaction(), "the session's own nested transaction is still SQLAlchemy's"
    tool(conn, "c")  # a later tool's begin_nested still works
    backend.commit()
    conn.commit()
    assert names(conn) == ["a", "c"]


def test_closing_an_outer_savepoint_closes_the_ones_opened_after_it(conn: sa.Connection) -> None:
    backend = SqlBackend(conn, [items])
    backend.begin()
    outer = backend.savepoint()
    tool(conn, "a")
    inner = backend.savepoint()
    tool(conn, "b")

    backend.rollback_to(outer)

    assert names(conn) == []
    with pytest.raises(Exception, match="unknown or closed savepoint"):
        backend.release(inner)
    again = backend.savepoint()
    tool(conn, "c")
    backend.release(again)
    backend.rollback()
    conn.rollback()
    assert names(conn) == []
