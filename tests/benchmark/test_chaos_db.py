"""What the PostgreSQL kill trials of ``bench chaos`` found: a shadow transaction whose ``begin`` failed
on a lock left its connection in an aborted transaction, so every later ``begin`` of that session
failed with "current transaction is aborted" and the session could never write again. Since the
capture triggers are installed once, outside sessions (guard/pg_capture.py), ``begin`` waits on a lock
only while that one-time install waits for a transaction writing the table; sessions no longer wait
on each other."""

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
    with pg_schema.connect() as writer, pg_schema.connect() as session_conn:
        writer.exec_driver_sql("INSERT INTO notes VALUES ('w', 'x')")  # open: holds the table's writer lock
        session = SqlBackend(session_conn, [notes], lock_timeout_s=0.1)
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
            session.begin()  # installing the capture trigger waits for the writer
        assert not session_conn.in_transaction() or session_conn.get_transaction() is None
        writer.commit()
        session.begin()
        session_conn.execute(notes.insert().values(id="a", body="x"))
        session.commit()
    with pg_schema.connect() as conn:
        assert sorted(conn.execute(sa.text("SELECT id FROM notes")).scalars().all()) == ["a", "w"]


def _text(result: Any) -> str:
    return " ".join(getattr(p, "text", "") for p in result.content)


@pytest.mark.postgres
def test_a_session_whose_begin_waits_on_a_lock_gets_a_retryable_error_and_sessions_then_run_side_by_side(
    tmp_path: Path,
) -> None:
    """Through the proxy, on a PostgreSQL upstream: while a plain transaction that wrote the table is
    open, the first session's call cannot install the capture trigger. It must get a retryable
    lock-contention error, its session not poisoned. Once the writer commits, two sessions hold
    uncommitted writes at the same time (before, the second waited for the first to end) and commit."""
    require_postgres()
    db, _ = chaos_db.pg_run_url(PG_URL)
    chaos_db.prepare(db)
    notes = NotesHttp(tmp_path, db)
    proxy = None
    direct = sa.create_engine(sa.make_url(db).set(drivername="postgresql+psycopg"), poolclass=sa.NullPool)
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
                with direct.connect() as writer:
                    writer.exec_driver_sql("INSERT INTO notes VALUES ('direct', 'x', 'draft')")
                    blocked = await c.call_tool(
                        "put_note", {"id": "a", "body": "x", "status": "draft"}, meta=meta("A")
                    )
                    assert blocked.is_error
                    verdict = blocked.structured_content or {}
                    assert verdict.get("error_class") == "transient", _text(blocked)
                    assert verdict["hint"]["retryable"] is True
                    writer.commit()
                for session in ("A", "B"):
                    wrote = await c.call_tool(
                        "put_note",
                        {"id": session.lower(), "body": "x", "status": "draft"},
                        meta=meta(session),
                    )
                    assert not wrote.is_error, _text(wrote)
                for session in ("A", "B"):
                    done = await c.call_tool("commit", {}, meta=meta(session))
                    assert (done.structured_content or {}).get("committed") is True, _text(done)
            assert seen == []

        anyio.run(main)
        assert set(notes_rows(db, "")) == {"a", "b", "direct"}
    finally:
        direct.dispose()
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
