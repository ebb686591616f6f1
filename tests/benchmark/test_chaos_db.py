"""What the PostgreSQL kill trials of ``bench chaos`` found: a shadow transaction whose ``begin`` failed
on a lock (another session's capture trigger being installed on the same table) left its connection in
an aborted transaction, so every later ``begin`` of that session failed with "current transaction is
aborted" and the session could never write again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from benchmark import chaos_db
from benchmark.chaos_stack import NotesHttp, client, meta, notes_rows, start_proxy, write_config
from benchmark.fixtures import NOTES_POLICY
from guard.sql_backend import SqlBackend
from tests.support.services import PG_URL, require_postgres


@pytest.fixture
def pg_schema() -> Iterator[sa.Engine]:
    require_postgres()
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
    notes = sa.Table(
        "notes", sa.MetaData(), sa.Column("id", sa.Text, primary_key=True), sa.Column("body", sa.Text)
    )
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


def _text(result: Any) -> str:
    return " ".join(getattr(p, "text", "") for p in result.content)


@pytest.mark.postgres
def test_a_session_whose_begin_waits_on_another_sessions_lock_gets_a_retryable_error(tmp_path: Path) -> None:
    """Through the proxy, on a PostgreSQL upstream shared by two sessions: while session A holds an open
    shadow transaction, session B's first call cannot begin its own (A's capture DDL holds the table
    lock). B must get a retryable lock-contention error, its session not poisoned; once A commits, B's
    same call and commit go through."""
    require_postgres()
    db, _ = chaos_db.pg_run_url(PG_URL)
    chaos_db.prepare(db)
    notes = NotesHttp(tmp_path, db)
    proxy = None
    try:
        url = notes.start()
        upstream = {"name": "notes", "transport": "http", "url": url, "policy": str(NOTES_POLICY)}
        proxy, proxy_url = start_proxy(
            write_config(tmp_path / "proxy.yaml", [upstream]), tmp_path / "proxy.log"
        )

        async def main() -> None:
            seen: list[int] = []
            http, c = client(proxy_url, seen)
            async with http, c:
                first = await c.call_tool(
                    "put_note", {"id": "a", "body": "x", "status": "draft"}, meta=meta("A")
                )
                assert not first.is_error, _text(first)
                blocked = await c.call_tool(
                    "put_note", {"id": "b", "body": "x", "status": "draft"}, meta=meta("B")
                )
                assert blocked.is_error
                verdict = blocked.structured_content or {}
                assert verdict.get("error_class") == "transient", _text(blocked)
                assert verdict["hint"]["retryable"] is True
                assert (await c.call_tool("commit", {}, meta=meta("A"))).structured_content[
                    "committed"
                ] is True
                again = await c.call_tool(
                    "put_note", {"id": "b", "body": "x", "status": "draft"}, meta=meta("B")
                )
                assert not again.is_error, _text(again)
                done = await c.call_tool("commit", {}, meta=meta("B"))
                assert (done.structured_content or {}).get("committed") is True, _text(done)
            assert seen == []

        anyio.run(main)
        assert set(notes_rows(db, "")) == {"a", "b"}
    finally:
        if proxy is not None:
            proxy.stop()
        notes.stop()
        chaos_db.drop(db)


@pytest.mark.postgres
def test_the_postgresql_checker_finds_double_writes_and_orphaned_capture_objects() -> None:
    require_postgres()
    db, schema = chaos_db.pg_run_url(PG_URL)
    chaos_db.prepare(db)
    engine = sa.create_engine(sa.make_url(db).set(drivername="postgresql+psycopg"), poolclass=sa.NullPool)
    try:
        assert chaos_db.read_state(db, "t1-") == (set(), {}, [])
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO notes VALUES ('t1-a', 'x', 'draft'), ('t2-a', 'x', 'draft')")
            conn.exec_driver_sql("UPDATE notes SET body = 'y' WHERE id = 't1-a'")
            conn.exec_driver_sql("CREATE TABLE _sg_changes (id int)")
            conn.exec_driver_sql(
                "CREATE TRIGGER sg_capture AFTER INSERT ON notes FOR EACH ROW EXECUTE FUNCTION chaos_count()"
            )
        present, applied, orphans = chaos_db.read_state(db, "t1-")
        assert (present, applied, sorted(orphans)) == ({"t1-a"}, {"t1-a": 2}, ["_sg_changes", "sg_capture"])
        assert chaos_db.present_count(db, ["t1-a", "t2-a", "t3-a"]) == 2
    finally:
        engine.dispose()
        chaos_db.drop(db)
    assert schema.startswith("chaos_")
