"""PostgreSQL shadow sessions on one database run side by side (issue 15).

The capture function and triggers are installed once, outside any session (guard/pg_capture.py), and
log only for transactions that turned capture on, into a TEMP log of their own. Before, every session
created them inside its transaction and held the table's SHARE ROW EXCLUSIVE lock until it ended, so
the second session's ``begin`` waited out ``lock_timeout`` and failed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from guard.models import ChangeSet
from guard.pg_capture import CAPTURE_SETTING, TRIGGER, VERSION_MARK, ensure_capture_triggers
from guard.sql_backend import SqlBackend
from tests.support.guardcore import notes, notes_metadata
from tests.support.services import pg_engine_url, require_postgres

SESSIONS = 6


@pytest.fixture
def engine() -> Iterator[sa.Engine]:
    """An engine whose connections use a fresh schema of their own (dropped afterwards)."""
    require_postgres()
    schema = f"sg_cap_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_engine_url(), poolclass=NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    scoped = sa.create_engine(
        pg_engine_url(), poolclass=NullPool, connect_args={"options": f"-csearch_path={schema}"}
    )
    with scoped.begin() as conn:
        notes_metadata.create_all(conn)
    try:
        yield scoped
    finally:
        scoped.dispose()
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


def _rows(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {str(r[0]) for r in conn.execute(sa.select(notes.c.id))}


def test_concurrent_sessions_write_side_by_side_and_their_change_sets_stay_private(engine: sa.Engine) -> None:
    with engine.connect() as conn:  # the one-time install, as the first session would do it
        ensure_capture_triggers(conn, ["notes"], lock_timeout_s=5.0)
    all_open = threading.Barrier(SESSIONS + 1, timeout=60)
    written = threading.Barrier(SESSIONS + 1, timeout=60)
    pids: list[int] = []

    def session(n: int) -> ChangeSet:
        with engine.connect() as conn:
            backend = SqlBackend(conn, [notes])  # lock_timeout 0.25 s: a lock wait would fail begin
            backend.begin()
            pids.append(int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))
            all_open.wait()
            conn.execute(notes.insert().values(id=f"s{n}", body=f"session {n}"))
            written.wait()  # every session holds an uncommitted write at once
            written.wait()  # ... while the main thread looked and a plain writer wrote
            changes = backend.changes()
            backend.commit()
            return changes

    with ThreadPoolExecutor(SESSIONS) as pool:
        futures = [pool.submit(session, n) for n in range(SESSIONS)]
        all_open.wait()
        written.wait()
        with engine.connect() as plain:
            waiting: int = plain.execute(
                sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = ANY(:pids)"),
                {"pids": pids},
            ).scalar_one()
            plain.exec_driver_sql("SET lock_timeout = 250")
            plain.execute(notes.insert().values(id="plain", body="not a shadow session"))
            plain.commit()
            assert _rows(engine) == {"plain"}, "no session's uncommitted row is visible to others"
        written.wait()
        change_sets = [f.result(timeout=60) for f in futures]

    assert waiting == 0
    for n, changes in enumerate(change_sets):
        assert [(c.table, c.key, c.op, c.after) for c in changes] == [
            ("notes", f"s{n}", "insert", {"id": f"s{n}", "body": f"session {n}"})
        ]
    assert _rows(engine) == {"plain"} | {f"s{n}" for n in range(SESSIONS)}


def test_a_writer_outside_shadow_sessions_is_not_logged_and_needs_no_log(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        backend = SqlBackend(conn, [notes])
        backend.begin()
        backend.rollback()
        assert conn.exec_driver_sql(f"SELECT current_setting('{CAPTURE_SETTING}', true)").scalar() != "on"
        # No TEMP log exists on this connection now: a logging trigger would fail the insert.
        conn.execute(notes.insert().values(id="direct", body="x"))
        conn.commit()
        installed: int = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
                "WHERE t.tgrelid = CAST(to_regclass('notes') AS oid) AND t.tgname = :t "
                "AND strpos(p.prosrc, :mark) > 0"
            ),
            {"t": TRIGGER, "mark": VERSION_MARK},
        ).scalar_one()
    assert installed == 1
    assert _rows(engine) == {"direct"}


def test_an_ungated_capture_trigger_is_replaced(engine: sa.Engine) -> None:
    with engine.begin() as conn:  # what an older version would have left behind after a crash
        conn.exec_driver_sql(
            "CREATE FUNCTION sg_capture() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'old capture'; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER sg_capture AFTER INSERT ON notes FOR EACH ROW EXECUTE FUNCTION sg_capture()"
        )
    with engine.connect() as conn:
        backend = SqlBackend(conn, [notes])
        backend.begin()
        conn.execute(notes.insert().values(id="a", body="x"))
        assert [c.key for c in backend.changes()] == ["a"]
        backend.commit()
        conn.execute(notes.insert().values(id="b", body="y"))  # outside a session: not logged, no error
        conn.commit()
    assert _rows(engine) == {"a", "b"}
