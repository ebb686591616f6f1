"""The session ledger: a durable note of every guard session that holds uncommitted writes.

A guard session's pending writes live in its upstreams' open transactions, which end with the
proxy process: after a crash (kill -9, OOM, power) they are rolled back. The proxy's memory of its
sessions goes with them, so without a note on disk a ``commit`` sent under such a session after the
restart would find no session and answer "committed, nothing to do" over work that is gone.

The ledger is that note: one row per session whose transaction kept a write, written *before* the
agent is told the write succeeded, removed when the session's work ends in a way the agent learns
of (a commit, or a rollback it or an orchestrator asked for), and marked with the reason when the
proxy ends it behind the agent's back (idle timeout, closed connection, shutdown). When a process
starts, the rows its predecessor left open are marked ``restarted``. An id the proxy does not know
is looked up here (:meth:`SessionLedger.take_lost`): a row means the session's writes were lost,
and the next ``commit`` under that id is refused with why.

It is a small SQL table (SQLAlchemy Core): an embedded SQLite file beside the config by default
(``sessions.store``), or PostgreSQL. Each proxy replica needs its own (a replica marks what it finds
open at startup as lost): with several replicas give each its own file or table prefix.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

OPEN = "open"
RESTARTED = "restarted"
"""The state of a row its process left open: that process stopped without ending the session."""
KEPT_DAYS = 30.0
"""Rows older than this are forgotten at startup (the agent long gave up on the session)."""
_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")
_BUSY_TIMEOUT_S = 30.0


class LedgerError(RuntimeError):
    """The ledger cannot be opened, read or written; the message says which database and why."""


def _table(prefix: str) -> tuple[sa.MetaData, sa.Table]:
    metadata = sa.MetaData()
    table = sa.Table(
        f"{prefix}sessions",
        metadata,
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("principal", sa.String, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
    )
    return metadata, table


class SessionLedger:
    """Sessions with uncommitted writes, durable across restarts (see the module docstring).

    ``url``: a SQLAlchemy URL (``sqlite:////abs/file.db`` or ``postgresql://...``), with an optional
    ``table_prefix=`` query parameter (default ``shadowguard_``). In-memory SQLite is refused: it
    would not survive the crash it is for. Raises :class:`ValueError` for a URL it cannot use and
    :class:`LedgerError` when the database cannot be reached.
    """

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time) -> None:
        parsed = make_url(url)
        prefix = parsed.query.get("table_prefix", "shadowguard_")
        if not isinstance(prefix, str) or not _PREFIX.match(prefix):
            raise ValueError(f"table_prefix must match {_PREFIX.pattern}, got {prefix!r}")
        parsed = parsed.difference_update_query(["table_prefix"])
        self.backend = parsed.get_backend_name()
        if self.backend not in ("sqlite", "postgresql"):
            raise ValueError(f"the session ledger needs sqlite or postgresql, not {self.backend!r}")
        if self.backend == "sqlite" and parsed.database in (None, "", ":memory:"):
            raise ValueError("the session ledger needs a SQLite file: an in-memory one dies with the process")
        self.url = parsed.render_as_string(hide_password=True)
        self._clock = clock
        self._lock = threading.Lock()
        connect_args: dict[str, Any] = {"timeout": _BUSY_TIMEOUT_S} if self.backend == "sqlite" else {}
        self._engine = sa.create_engine(parsed, connect_args=connect_args)
        if self.backend == "sqlite":
            sa.event.listen(self._engine, "connect", _sqlite_wal)
        self._metadata, self._table = _table(prefix)
        try:
            self._create()
            with self._engine.begin() as conn:
                table = self._table
                conn.execute(table.delete().where(table.c.since < clock() - KEPT_DAYS * 86400))
                conn.execute(table.update().where(table.c.state == OPEN).values(state=RESTARTED))
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            raise LedgerError(f"session ledger {self.url}: {exc.__class__.__name__}: {exc}") from exc

    def _create(self) -> None:
        """The table, created if missing; two processes starting on one file at once both succeed."""
        try:
            with self._engine.begin() as conn:
                self._metadata.create_all(conn)
        except sa.exc.OperationalError:
            with self._engine.begin() as conn:
                self._metadata.create_all(conn)  # the other process created it meanwhile

    def _run(self, what: str, work: Callable[[sa.Connection], Any]) -> Any:
        with self._lock:
            try:
                with self._engine.begin() as conn:
                    return work(conn)
            except sa.exc.SQLAlchemyError as exc:
                raise LedgerError(f"session ledger {self.url}: {what}: {exc.__class__.__name__}") from exc

    def opened(self, session_id: str, principal: str | None) -> None:
        """``session_id`` now holds uncommitted writes (call before the agent learns of the first)."""
        table = self._table

        def work(conn: sa.Connection) -> None:
            changed = conn.execute(
                table.update()
                .where(table.c.id == session_id)
                .values(principal=principal, state=OPEN, since=self._clock())
            ).rowcount
            if not changed:
                conn.execute(
                    table.insert().values(id=session_id, principal=principal, state=OPEN, since=self._clock())
                )

        self._run("record a session", work)

    def forget(self, session_id: str) -> None:
        """The session's writes were committed or rolled back at the agent's or an orchestrator's request."""
        self._run(
            "forget a session",
            lambda conn: conn.execute(self._table.delete().where(self._table.c.id == session_id)),
        )

    def ended(self, session_id: str, reason: str) -> None:
        """The proxy rolled the session back behind the agent (``reason``: idle, closed, shutdown, ...)."""
        table = self._table
        self._run(
            "mark a session ended",
            lambda conn: conn.execute(
                table.update().where(table.c.id == session_id).values(state=reason, since=self._clock())
            ),
        )

    def take_lost(self, session_id: str, principal: str | None) -> str | None:
        """Why the writes of a session this process does not hold were lost (``restarted``, ``idle``,
        ...), or None; the row is removed, so the agent is told once. Another principal's row is
        left alone and answered None, exactly as an unknown id."""
        table = self._table

        def work(conn: sa.Connection) -> str | None:
            row = conn.execute(
                sa.select(table.c.principal, table.c.state).where(table.c.id == session_id)
            ).first()
            if row is None or row.principal != principal or row.state == OPEN:
                return None
            conn.execute(table.delete().where(table.c.id == session_id))
            return str(row.state)

        result: str | None = self._run("look a session up", work)
        return result

    def close(self) -> None:
        self._engine.dispose()


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
    finally:
        cursor.close()


__all__ = ["OPEN", "RESTARTED", "LedgerError", "SessionLedger"]
