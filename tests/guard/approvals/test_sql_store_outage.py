"""The PostgreSQL approval store after an outage (issue 15, ``bench chaos`` approval-store-postgresql).

A pooled connection whose backend went away, or that was left mid-query, must not turn into an internal
error: every DBAPI error of the store is :class:`ApprovalStoreUnavailable`, and the connection that
failed is discarded, so the next use after the outage works. Real PostgreSQL, its backends killed with
``pg_terminate_backend`` from an admin connection.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from guard.approvals import ApprovalQuery, ApprovalState, ApprovalStoreUnavailable, SqlApprovalStore
from tests.support.services import PG_URL

pytestmark = pytest.mark.postgres
PENDING = ApprovalQuery(states=[ApprovalState.PENDING], limit=1)


@pytest.fixture
def store(approval_store_url: Callable[[str], str]) -> Iterator[SqlApprovalStore]:
    """A store of the test's own whose connections carry an application_name the test can find."""
    app = f"sg-outage-{uuid.uuid4().hex[:8]}"
    opened = SqlApprovalStore(f"{approval_store_url('postgresql')}&application_name={app}")
    try:
        yield opened
    finally:
        opened.close()


def _admin(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        cursor = admin.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _kill_backends(store: SqlApprovalStore) -> int:
    app = store._engine.url.query["application_name"]
    rows = _admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", app)
    return len(rows)


def _leave_mid_query(store: SqlApprovalStore) -> None:
    """The next connection the pool takes back keeps a query in flight (libpq status ACTIVE), as the
    chaos trial's outage left one: the pool hands it out again on the next use."""

    @sa.event.listens_for(store._engine.pool, "checkin", once=True)
    def _send(dbapi: Any, _record: Any) -> None:
        dbapi.pgconn.send_query(b"SELECT pg_sleep(0)")

    store.list(PENDING)
    pool = store._engine.pool
    assert isinstance(pool, sa.QueuePool) and pool.checkedin() >= 1


def test_a_pooled_connection_left_mid_query_is_discarded(store: SqlApprovalStore) -> None:
    _leave_mid_query(store)
    # before the fix: sqlalchemy.exc.ProgrammingError "can't change 'autocommit' now: connection in
    # transaction status ACTIVE", from the pool's pre-ping, and the connection stayed in the pool
    assert store.list(PENDING) == []
    assert store.list(PENDING) == []


def test_backends_killed_then_back_the_next_use_works(store: SqlApprovalStore) -> None:
    store.list(PENDING)
    assert _kill_backends(store) >= 1
    assert store.list(PENDING) == []
    assert _kill_backends(store) >= 1
    _leave_mid_query(store)
    assert store.list(PENDING) == []


def test_any_database_error_is_the_store_unavailable_and_changes_nothing(store: SqlApprovalStore) -> None:
    table = f"{store.table_prefix}approvals"
    _admin(f'ALTER TABLE "{table}" RENAME TO "{table}_away"')
    try:
        # before the fix: sqlalchemy.exc.ProgrammingError (UndefinedTable) escaped as an internal error
        with pytest.raises(
            ApprovalStoreUnavailable, match=r"cannot read the approval store .*does not exist"
        ):
            store.list(PENDING)
        with pytest.raises(ApprovalStoreUnavailable, match="cannot read the approval store"):
            store.get("apr_" + "x" * 24)
    finally:
        _admin(f'ALTER TABLE "{table}_away" RENAME TO "{table}"')
    assert store.list(PENDING) == []
