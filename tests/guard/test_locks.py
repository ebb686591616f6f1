"""Shadow transactions and database locks (docs/adr/009): a session that has kept nothing holds no
write lock, and a call refused a lock is retried in a fresh transaction, on a real SQLite file in
WAL mode (the notes fixture's setup) with two connections: the session's and another writer's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchmark.fixtures.notes_server import sqlite_engine
from guard.classifier import Classifier
from guard.effects import ToolInfo
from guard.errors import ErrorClass, LockContention
from guard.models import EffectClass, Verdict
from guard.policy import PolicyPackModel, compile_pack
from guard.retry import RetryPolicy, VirtualClock
from guard.session import GuardSession, ToolResult
from guard.sql_backend import SqlBackend
from tests.support.guardcore import notes, notes_metadata

TOOLS = {
    "get_note": ToolInfo(name="get_note", annotations={"readOnlyHint": True}),
    "put_note": ToolInfo(name="put_note", annotations={"readOnlyHint": False, "destructiveHint": False}),
    "delete_note": ToolInfo(name="delete_note", annotations={"readOnlyHint": False, "destructiveHint": True}),
}
PACK = compile_pack(
    PolicyPackModel.model_validate(
        {
            "version": 1,
            "name": "locks",
            "checks": [
                {
                    "id": "body_not_empty",
                    "source": {"ref": "Notes handbook §1", "quote": "Every note has a body."},
                    "phase": "after_call",
                    "tools": ["put_note"],
                    "message": "A note needs a body.",
                    "sql": "SELECT id FROM notes WHERE body = ''",
                }
            ],
            "approvals": [
                {
                    "id": "delete_needs_review",
                    "source": {"ref": "Notes handbook §3", "quote": "A note is deleted only with approval."},
                    "tools": ["delete_note"],
                }
            ],
        }
    )
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sa.Engine]:
    made = sqlite_engine(tmp_path / "notes.sqlite", timeout=0.2)
    with made.begin() as conn:
        notes_metadata.create_all(conn)
        conn.execute(notes.insert(), [{"id": "n1", "body": "one"}, {"id": "n2", "body": "two"}])
    yield made
    made.dispose()


def executor(conn: sa.Connection) -> Any:
    """The notes tools on the session's connection; a database error is an in-band tool error."""

    def execute(tool: str, args: Mapping[str, Any]) -> ToolResult:
        try:
            if tool == "get_note":
                row = conn.execute(sa.select(notes.c.body).where(notes.c.id == args["id"])).first()
                return ToolResult(text=str(row[0]) if row else "none")
            if tool == "put_note":
                conn.execute(sa.select(notes.c.id).where(notes.c.id == args["id"])).first()
                conn.execute(notes.update().where(notes.c.id == args["id"]).values(body=args["body"]))
                return ToolResult(text="ok")
            conn.execute(notes.delete().where(notes.c.id == args["id"]))
            return ToolResult(text="deleted")
        except sa.exc.OperationalError as exc:
            return ToolResult(text=str(exc.orig), is_error=True)

    return execute


def session_on(conn: sa.Connection) -> GuardSession:
    clock = VirtualClock()
    return GuardSession(
        SqlBackend(conn, [notes]), executor(conn), TOOLS, PACK, retry=RetryPolicy(clock=clock)
    )


def other_writer_can_write(db: sa.Engine) -> bool:
    try:
        with db.begin() as conn:
            conn.execute(notes.update().where(notes.c.id == "n1").values(body="direct"))
    except sa.exc.OperationalError as exc:
        assert "database is locked" in str(exc)
        return False
    return True


@pytest.mark.parametrize(
    ("tool", "arguments", "verdict"),
    [
        ("delete_note", {"id": "n2"}, Verdict.HELD),
        ("put_note", {"id": "n2", "body": ""}, Verdict.ROLLED_BACK),
    ],
)
def test_a_call_undone_by_the_guard_leaves_no_write_lock(
    db: sa.Engine, tool: str, arguments: dict[str, Any], verdict: Verdict
) -> None:
    with db.connect() as conn:
        session = session_on(conn)
        outcome = session.call(tool, arguments)
        assert outcome.verdict is verdict, outcome
        assert other_writer_can_write(db)
        assert session.call("put_note", {"id": "n2", "body": "kept"}).verdict is Verdict.ALLOWED
        assert not other_writer_can_write(db), "a kept write holds the lock until commit"
        assert session.commit().committed
    assert other_writer_can_write(db)


def test_after_a_kept_write_an_undone_call_keeps_the_transaction(db: sa.Engine) -> None:
    with db.connect() as conn:
        session = session_on(conn)
        assert session.call("put_note", {"id": "n1", "body": "mine"}).verdict is Verdict.ALLOWED
        assert session.call("put_note", {"id": "n2", "body": ""}).verdict is Verdict.ROLLED_BACK
        assert [c.key for c in session.pending_changes()] == ["n1"]
        assert session.commit().committed
    with db.connect() as conn:
        assert conn.execute(sa.select(notes.c.body).where(notes.c.id == "n1")).scalar() == "mine"


def test_a_write_refused_the_lock_is_retried_in_a_fresh_transaction(db: sa.Engine) -> None:
    """The session read first (its snapshot predates the other writer's commit): SQLite refuses that
    snapshot the write lock for good, so only a new transaction can write."""
    with db.connect() as conn:
        session = session_on(conn)
        assert session.call("get_note", {"id": "n1"}).verdict is Verdict.ALLOWED
        assert other_writer_can_write(db)
        outcome = session.call("put_note", {"id": "n2", "body": "after"})
        assert outcome.verdict is Verdict.ALLOWED, outcome
        assert outcome.retries >= 1 and outcome.attempts[0].error_class == ErrorClass.TRANSIENT.value
        assert session.commit().committed


def test_a_lock_held_by_another_writer_fails_as_retryable_with_a_hint(db: sa.Engine) -> None:
    with db.connect() as holder:
        holder.begin()
        holder.execute(notes.update().where(notes.c.id == "n1").values(body="held"))
        with db.connect() as conn:
            session = session_on(conn)
            outcome = session.call("put_note", {"id": "n2", "body": "blocked"})
        holder.rollback()
    assert outcome.verdict is Verdict.FAILED
    assert outcome.error_class == ErrorClass.TRANSIENT.value
    assert outcome.hint is not None and outcome.hint.retryable
    assert "Another session holds a lock" in outcome.hint.next_step
    assert outcome.retries > 0 and outcome.effect is EffectClass.WRITE


@pytest.mark.parametrize(
    "message",
    [
        "database is locked",
        "(sqlite3.OperationalError) database table is locked",
        "canceling statement due to lock timeout",
        'could not obtain lock on row in relation "notes"',
        "deadlock detected",
        "could not serialize access due to concurrent update",
        "Lock wait timeout exceeded; try restarting transaction",
    ],
)
def test_lock_failures_are_classified_as_lock_contention(message: str) -> None:
    failure = Classifier().text("put_note", message)
    assert isinstance(failure, LockContention) and failure.rule == "lock_contention"
    assert failure.retryable and failure.restart_transaction
    assert failure.hint().error_class == "transient"
