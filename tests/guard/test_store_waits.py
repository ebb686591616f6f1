"""The stores the proxy keeps its own state in fail, not hang, when their server stops answering
(guard.pgconnect, the Redis approval store's socket timeout).

A "silent server" here accepts TCP connections and never sends a byte: what a database behind a
wedged host or a half-open network path looks like to its client. Before the bounds, each of these
calls waited forever; each runs in a thread the test joins with a generous limit, so that a
regression fails the test instead of hanging the suite. Lock waits use the real PostgreSQL server.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from guard import pgconnect
from guard.approvals import (
    ApprovalQuery,
    ApprovalState,
    ApprovalStoreUnavailable,
    RedisApprovalStore,
    SqlApprovalStore,
    redis_store,
)
from proxy.ledger import LedgerError, SessionLedger
from tests.support.services import PG_URL

WATCHDOG_S = 60.0
"""Far above every bound the tests set (1-2 s): reaching it means the call hung."""


@contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers; the connections stay open until the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for conn in held:
            conn.close()


def _raises_in_time(work: Callable[[], Any]) -> BaseException:
    """The exception ``work`` raised in a thread; fails the test if it returned or hung."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WATCHDOG_S)
    assert not thread.is_alive(), f"the call still waits after {WATCHDOG_S:.0f} s: no bound applied"
    [raised] = outcome
    assert raised is not None, "the call succeeded against a server that never answers"
    return raised


def test_the_bounds_yield_to_what_the_url_sets() -> None:
    url = sa.make_url("postgresql+psycopg://u@h/db?connect_timeout=3&options=-c%20search_path%3Dx")
    args = pgconnect.pg_connect_args(url)
    assert "connect_timeout" not in args and "options" not in args
    assert args["tcp_user_timeout"] == pgconnect.TCP_USER_TIMEOUT_MS and args["keepalives"] == 1
    default = pgconnect.pg_connect_args(sa.make_url("postgresql+psycopg://u@h/db"))
    assert default["connect_timeout"] == pgconnect.CONNECT_TIMEOUT_S
    assert "lock_timeout=" in default["options"] and "statement_timeout=" in default["options"]


@pytest.mark.parametrize(
    ("opener", "refusal"),
    [(SqlApprovalStore, ApprovalStoreUnavailable), (SessionLedger, LedgerError)],
    ids=["approval store", "session ledger"],
)
def test_a_postgresql_store_that_never_answers_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, opener: Callable[[str], Any], refusal: type[Exception]
) -> None:
    monkeypatch.setattr(pgconnect, "CONNECT_TIMEOUT_S", 1)
    with silent_server() as port:
        raised = _raises_in_time(lambda: opener(f"postgresql://u@127.0.0.1:{port}/db"))
    assert isinstance(raised, refusal), repr(raised)
    assert f"127.0.0.1:{port}" in str(raised)


def test_a_redis_approval_store_that_never_answers_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_store, "_SOCKET_TIMEOUT_S", 1.0)
    with silent_server() as port:
        raised = _raises_in_time(lambda: RedisApprovalStore(f"redis://127.0.0.1:{port}/0"))
    assert isinstance(raised, ApprovalStoreUnavailable), repr(raised)


@pytest.mark.postgres
def test_an_approval_store_read_behind_a_stuck_lock_holder_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, approval_store_url: Callable[[str], str]
) -> None:
    monkeypatch.setattr(pgconnect, "LOCK_TIMEOUT", "1s")
    store = SqlApprovalStore(approval_store_url("postgresql"))
    pending = ApprovalQuery(states=[ApprovalState.PENDING], limit=1)
    try:
        store.list(pending)  # the pool's connection opened, with the bounds, before the lock is held
        table = f"{store.table_prefix}approvals"
        with psycopg.connect(PG_URL) as holder:  # a peer whose transaction holds the table and is stuck
            holder.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
            raised = _raises_in_time(lambda: store.list(pending))
            holder.rollback()
        assert isinstance(raised, ApprovalStoreUnavailable), repr(raised)
        assert "lock timeout" in str(raised).lower() or "LockNotAvailable" in str(raised), str(raised)
        assert store.list(pending) == []  # the lock released: the store works again
    finally:
        store.close()
