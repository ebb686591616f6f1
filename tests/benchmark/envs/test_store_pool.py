"""SQLite attempt connections are pooled per domain (issue 16): a reused connection holds exactly the
template, an empty capture log and the capture triggers, and runs no capture DDL."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.envs.store import SQLITE_IDLE_PER_DOMAIN
from benchmark.guarded import backend_for
from guard.sqlite_capture import LOG

TICKETS = "zendesk_tickets"


@pytest.fixture
def db() -> Iterator[Database]:
    """A Database of its own, so that its pool holds only this test's connections."""
    database = Database()
    yield database
    database.dispose()


def raw_of(env: Environment) -> sqlite3.Connection:
    raw = env.connection.connection.dbapi_connection
    assert isinstance(raw, sqlite3.Connection)
    return raw


def logged(env: Environment) -> int:
    return int(env.connection.exec_driver_sql(f"SELECT COUNT(*) FROM temp.{LOG}").scalar_one())


def delete_first_ticket(env: Environment) -> None:
    assert env.table(TICKETS).delete(env.state.rows(TICKETS)[0]["id"])


def test_a_reused_connection_holds_the_template_page_for_page(retail: Domain, db: Database) -> None:
    with Environment(retail, db) as env:
        raw = raw_of(env)
        pristine, pristine_hash = raw.serialize(), env.state_hash()
        env.apply_patch({TICKETS: [{**env.state.rows(TICKETS)[0], "status": "solved"}]})
        backend = backend_for(env)
        backend.begin()
        delete_first_ticket(env)
        backend.commit()  # the session's writes stay in the attempt, which close() rolls back
    with Environment(retail, db) as env:
        assert raw_of(env) is raw
        assert raw.serialize() == pristine
        assert env.state_hash() == pristine_hash


def test_guarded_attempts_on_a_reused_connection_create_no_capture_objects(
    retail: Domain, db: Database
) -> None:
    with Environment(retail, db) as env:
        backend = backend_for(env)
        backend.begin()
        delete_first_ticket(env)
        backend.commit()
    for _ in range(2):
        with Environment(retail, db) as env:
            seen: list[str] = []
            raw_of(env).set_trace_callback(seen.append)
            assert logged(env) == 0
            backend = backend_for(env)
            backend.begin()
            delete_first_ticket(env)
            assert [c.table for c in backend.changes().changes] == [TICKETS]
            backend.commit()
            raw_of(env).set_trace_callback(None)
        assert not [s for s in seen if s.lstrip().upper().startswith(("CREATE", "DROP"))]


def test_a_rolled_back_session_leaves_the_connection_clean(retail: Domain, db: Database) -> None:
    with Environment(retail, db) as env:
        raw, pristine = raw_of(env), env.state_hash()
        backend = backend_for(env)
        backend.begin()
        delete_first_ticket(env)
        backend.rollback()
        delete_first_ticket(env)  # an unguarded write: not logged
        assert logged(env) == 0
    with Environment(retail, db) as env:
        assert raw_of(env) is raw
        assert logged(env) == 0 and env.state_hash() == pristine


def test_a_connection_left_capturing_is_closed_not_reused(retail: Domain, db: Database) -> None:
    """A session that began and never ended: its capture must not reach the next attempt."""
    with Environment(retail, db) as env:
        raw, pristine = raw_of(env), env.state_hash()
        backend_for(env).begin()
        delete_first_ticket(env)
        assert logged(env) == 1
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        raw.execute("SELECT 1")
    with Environment(retail, db) as env:
        assert raw_of(env) is not raw
        assert env.state_hash() == pristine
        delete_first_ticket(env)  # no session: the gate is off
        assert logged(env) == 0


def test_a_connection_with_a_commit_is_closed_not_reused(retail: Domain, db: Database) -> None:
    with Environment(retail, db) as env:
        raw, pristine = raw_of(env), env.state_hash()
        delete_first_ticket(env)
        env.connection.commit()
    with Environment(retail, db) as env:
        assert raw_of(env) is not raw
        assert env.state_hash() == pristine


def test_the_pool_keeps_a_bounded_number_of_idle_connections(retail: Domain, db: Database) -> None:
    opened = SQLITE_IDLE_PER_DOMAIN + 2
    with ExitStack() as stack:
        first = [raw_of(stack.enter_context(Environment(retail, db))) for _ in range(opened)]
    assert len({id(r) for r in first}) == opened
    with ExitStack() as stack:
        second = [raw_of(stack.enter_context(Environment(retail, db))) for _ in range(opened)]
    reused = [r for r in second if any(r is f for f in first)]
    assert len(reused) == SQLITE_IDLE_PER_DOMAIN


def test_dispose_closes_the_pooled_connections(retail: Domain) -> None:
    database = Database()
    with Environment(retail, database) as env:
        raw = raw_of(env)
    database.dispose()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        raw.execute("SELECT 1")


def test_attempts_from_several_threads_each_start_from_the_template(retail: Domain, db: Database) -> None:
    """As the environment server runs them: attempts on worker threads, sharing one Database."""
    with Environment(retail, db) as env:
        pristine = env.state_hash()
    seen: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def attempts() -> None:
        try:
            for i in range(10):
                with Environment(retail, db) as env:
                    start = env.state_hash()
                    backend = backend_for(env)
                    backend.begin()
                    delete_first_ticket(env)
                    if i % 2:
                        backend.commit()
                    else:
                        backend.rollback()
                with lock:
                    seen.append(start)
        except BaseException as exc:  # reported below, so a failing thread fails the test
            errors.append(exc)

    threads = [threading.Thread(target=attempts) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert seen == [pristine] * 40
