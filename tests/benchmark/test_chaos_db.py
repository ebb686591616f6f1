"""What the PostgreSQL kill trials of ``bench chaos`` found: a shadow transaction whose ``begin`` failed
on a lock (another session's capture trigger being installed on the same table) left its connection in
an aborted transaction, so every later ``begin`` of that session failed with "current transaction is
aborted" and the session could never write again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from guard.sql_backend import SqlBackend
from tests.conftest import PG_URL, _pg_available


@pytest.fixture
def pg_schema() -> Iterator[sa.Engine]:
    _pg_available()
    schema = f"chaos_t_{uuid.uuid4().hex[:10]}"
    url = sa.make_url(PG_URL).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(url, poolclass=sa.NullPool, connect_args={"options": f"-csearch_path={schema}"})
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        conn.exec_driver_sql("CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
    yield engine
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    engine.dispose()


@pytest.mark.postgres
def test_a_begin_that_failed_on_a_lock_leaves_the_connection_usable(pg_schema: sa.Engine) -> None:
    notes = sa.Table("notes", sa.MetaData(), sa.Column("id", sa.Text, primary_key=True), sa.Column("body", sa.Text))
    with pg_schema.connect() as first_conn, pg_schema.connect() as second_conn:
        first = SqlBackend(first_conn, [notes])
        second = SqlBackend(second_conn, [notes], lock_timeout_s=0.1)
        first.begin()  # holds the table lock its capture trigger took, until it ends
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
            second.begin()
        first.rollback()
        second.begin()
        second_conn.execute(notes.insert().values(id="a", body="x"))
        second.commit()
        second_conn.commit()
    with pg_schema.connect() as conn:
        assert conn.execute(sa.text("SELECT id FROM notes")).scalars().all() == ["a"]
