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
is looked up here (:meth:`SessionLedger.take`): a row means the session's writes were lost,
and the next ``commit`` under that id is refused with why.

A commit is noted too (docs/adr/011-commit-records-and-participant-leases.md): before the first
upstream is asked to commit, the row becomes ``committing`` with the upstreams in commit order; each
upstream is added to ``applied`` once it answered that it committed. A process that dies in between
leaves the row ``committing``; its successor marks it ``commit_interrupted``, and the next ``commit``
under the id is answered with what is known: applied, outcome unknown (the upstream the commit was
sent to, or about to be, when the proxy died), not applied (its transaction died with the proxy).
A commit that fails part-way in a live process leaves the same record as ``partial_commit``.

Rows are keyed by (principal, id): two principals may use one id without meeting (``""`` stands
for no principal).

It is a small SQL table (SQLAlchemy Core): an embedded SQLite file beside the config by default
(``sessions.store``), or PostgreSQL. Each proxy replica needs its own (a replica marks what it finds
open at startup as lost): with several replicas give each its own file or table prefix.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from guard.pgconnect import pg_connect_args

OPEN = "open"
RESTARTED = "restarted"
"""The state of a row its process left open: that process stopped without ending the session."""
COMMITTING = "committing"
"""A commit is under way: some upstreams may have committed (``applied``), others not yet."""
INTERRUPTED = "commit_interrupted"
"""The state of a row its process left ``committing``: it died during the commit."""
PARTIAL = "partial_commit"
"""A commit failed part-way in a live process: the record names what was applied."""
KEPT_DAYS = 30.0
"""Rows older than this are forgotten at startup (the agent long gave up on the session)."""
_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")
_BUSY_TIMEOUT_S = 30.0


class LedgerError(RuntimeError):
    """The ledger cannot be opened, read or written; the message says which database and why."""


def _table(prefix: str) -> tuple[sa.MetaData, sa.Table]:
    metadata = sa.MetaData()
    table = sa.Table(
        f"{prefix}session_ledger",
        metadata,
        sa.Column("principal", sa.String, primary_key=True),
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
        sa.Column("commit", sa.Text, nullable=True),
    )
    return metadata, table


@dataclass(frozen=True)
class CommitRecord:
    """What a commit did on each upstream, as far as the proxy knows (the ledger's ``commit`` column).

    ``upstreams`` in commit order; ``applied`` answered that they committed (or, journaled, applied
    each call when it ran); ``unknown`` were asked, or about to be asked, when the answer was lost;
    the rest were not applied."""

    upstreams: tuple[str, ...]
    applied: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()

    @property
    def not_applied(self) -> tuple[str, ...]:
        return tuple(u for u in self.upstreams if u not in self.applied and u not in self.unknown)

    @property
    def complete(self) -> bool:
        """Every upstream is known to have committed."""
        return set(self.upstreams) <= set(self.applied)

    def interrupted(self) -> CommitRecord:
        """The record of a commit whose process died: the first upstream not known applied may have
        committed (its answer was lost), the later ones were never asked."""
        pending = [u for u in self.upstreams if u not in self.applied]
        return CommitRecord(self.upstreams, self.applied, tuple(pending[:1]) + self.unknown)

    def as_json(self) -> dict[str, list[str]]:
        return {
            "upstreams": list(self.upstreams),
            "applied": list(self.applied),
            "unknown": list(self.unknown),
            "not_applied": list(self.not_applied),
        }

    def dumps(self) -> str:
        return json.dumps({"upstreams": self.upstreams, "applied": self.applied, "unknown": self.unknown})

    @classmethod
    def loads(cls, text: str) -> CommitRecord:
        data = json.loads(text)
        return cls(tuple(data["upstreams"]), tuple(data["applied"]), tuple(data.get("unknown", ())))


def applied_on(record: CommitRecord | None, name: str) -> CommitRecord | None:
    """The record after ``name`` answered that it committed."""
    if record is None or name not in record.upstreams or name in record.applied:
        return record
    return CommitRecord(record.upstreams, (*record.applied, name), record.unknown)


def failed_on(record: CommitRecord | None, name: str, *, unknown: bool = False) -> CommitRecord | None:
    """The record after the commit on ``name`` failed: unknown when its answer was lost (the
    connection went), else not applied (the upstream answered that it did not commit)."""
    if record is None or not unknown or name not in record.upstreams:
        return record
    return CommitRecord(record.upstreams, record.applied, (*record.unknown, name))


@dataclass(frozen=True)
class LedgerEntry:
    """A session's row: why its work ended behind the agent, and its commit record if it was committing."""

    state: str
    commit: CommitRecord | None = field(default=None)


def _key(table: sa.Table, session_id: str, principal: str | None) -> sa.ColumnElement[bool]:
    return sa.and_(table.c.principal == (principal or ""), table.c.id == session_id)


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
        connect_args: dict[str, Any] = (
            {"timeout": _BUSY_TIMEOUT_S} if self.backend == "sqlite" else pg_connect_args(parsed)
        )
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
                self._interrupt(conn)
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            raise LedgerError(f"session ledger {self.url}: {exc.__class__.__name__}: {exc}") from exc

    def _interrupt(self, conn: sa.Connection) -> None:
        """Rows a dead predecessor left ``committing``: the upstream it was committing is unknown."""
        table = self._table
        rows = conn.execute(
            sa.select(table.c.principal, table.c.id, table.c.commit).where(table.c.state == COMMITTING)
        ).all()
        for row in rows:
            record = CommitRecord.loads(row.commit).interrupted()
            conn.execute(
                table.update()
                .where(_key(table, row.id, row.principal or None))
                .values(state=INTERRUPTED, commit=record.dumps())
            )

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

    def _put(self, conn: sa.Connection, session_id: str, principal: str | None, **values: Any) -> None:
        table = self._table
        values = {"since": self._clock(), **values}
        if not conn.execute(
            table.update().where(_key(table, session_id, principal)).values(**values)
        ).rowcount:
            conn.execute(table.insert().values(id=session_id, principal=principal or "", **values))

    def opened(self, session_id: str, principal: str | None) -> None:
        """``session_id`` now holds uncommitted writes (call before the agent learns of the first)."""
        self._run(
            "record a session",
            lambda conn: self._put(conn, session_id, principal, state=OPEN, commit=None),
        )

    def committing(self, session_id: str, principal: str | None, record: CommitRecord) -> None:
        """A commit starts (call before the first upstream is asked): ``record`` names the upstreams
        in commit order and those already applied (journaled upstreams applied their calls)."""
        self._run(
            "record a commit",
            lambda conn: self._put(conn, session_id, principal, state=COMMITTING, commit=record.dumps()),
        )

    def applied(self, session_id: str, principal: str | None, record: CommitRecord) -> None:
        """An upstream answered that it committed: ``record`` is the commit record now."""
        table = self._table
        self._run(
            "record a commit's progress",
            lambda conn: conn.execute(
                table.update().where(_key(table, session_id, principal)).values(commit=record.dumps())
            ),
        )

    def partial(self, session_id: str, principal: str | None, record: CommitRecord) -> None:
        """A commit failed part-way in this process: kept for the agent and orchestrators to read."""
        self._run(
            "record a partial commit",
            lambda conn: self._put(conn, session_id, principal, state=PARTIAL, commit=record.dumps()),
        )

    def forget(self, session_id: str, principal: str | None) -> None:
        """The session's writes were committed or rolled back at the agent's or an orchestrator's request."""
        table = self._table
        self._run(
            "forget a session",
            lambda conn: conn.execute(table.delete().where(_key(table, session_id, principal))),
        )

    def ended(self, session_id: str, principal: str | None, reason: str) -> None:
        """The proxy rolled the session back behind the agent (``reason``: idle, closed, shutdown, ...)."""
        table = self._table
        self._run(
            "mark a session ended",
            lambda conn: conn.execute(
                table.update()
                .where(_key(table, session_id, principal))
                .values(state=reason, since=self._clock(), commit=None)
            ),
        )

    def _entry(self, conn: sa.Connection, session_id: str, principal: str | None) -> LedgerEntry | None:
        table = self._table
        row = conn.execute(
            sa.select(table.c.state, table.c.commit).where(_key(table, session_id, principal))
        ).first()
        if row is None or row.state in (OPEN, COMMITTING):
            return None  # a session this process holds (or is committing) is no lost one
        record = CommitRecord.loads(row.commit) if row.commit else None
        return LedgerEntry(str(row.state), record)

    def peek(self, session_id: str, principal: str | None) -> LedgerEntry | None:
        """The entry of a session this process does not hold, left in place (for orchestrators)."""
        result: LedgerEntry | None = self._run(
            "look a session up", lambda conn: self._entry(conn, session_id, principal)
        )
        return result

    def entries(self, session_id: str) -> list[tuple[str | None, LedgerEntry]]:
        """Every principal's entry of this id, left in place (for orchestrators, who name no principal)."""
        table = self._table

        def work(conn: sa.Connection) -> list[tuple[str | None, LedgerEntry]]:
            query = sa.select(table.c.principal).where(table.c.id == session_id)
            principals: list[str] = list(conn.execute(query).scalars())
            found = [(p or None, self._entry(conn, session_id, p or None)) for p in principals]
            return [(p, e) for p, e in found if e is not None]

        result: list[tuple[str | None, LedgerEntry]] = self._run("look a session up", work)
        return result

    def take(self, session_id: str, principal: str | None) -> LedgerEntry | None:
        """Why the writes of a session this process does not hold were lost or what its interrupted
        commit did, or None; the row is removed, so the agent is told once. Rows are keyed by
        principal: another principal's session of the same id is not this one."""
        table = self._table

        def work(conn: sa.Connection) -> LedgerEntry | None:
            entry = self._entry(conn, session_id, principal)
            if entry is not None:
                conn.execute(table.delete().where(_key(table, session_id, principal)))
            return entry

        result: LedgerEntry | None = self._run("look a session up", work)
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


__all__ = [
    "COMMITTING",
    "INTERRUPTED",
    "OPEN",
    "PARTIAL",
    "RESTARTED",
    "CommitRecord",
    "LedgerEntry",
    "LedgerError",
    "SessionLedger",
    "applied_on",
    "failed_on",
]
