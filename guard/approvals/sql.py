"""The SQL approval store (SQLAlchemy Core): an embedded SQLite file by default, or PostgreSQL.

Two tables, created on open if missing: ``<prefix>approvals`` (the full :class:`Approval` JSON plus the
columns the store filters and swaps on) and the append-only ``<prefix>approval_events``. Times are
stored as integer microseconds since the Unix epoch (UTC) so both backends compare them exactly.

Every transition is one conditional ``UPDATE`` (its ``WHERE`` carries the compare-and-set) and, when it
changed a row, its event ``INSERT``, in one transaction: on PostgreSQL a concurrent ``UPDATE`` waits for
the row and re-checks the condition; on SQLite writes run under ``BEGIN IMMEDIATE`` in WAL mode with a
busy timeout, so several processes can share one file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from guard.approvals.models import (
    Approval,
    ApprovalEvent,
    ApprovalQuery,
    ApprovalState,
    utcnow,
)
from guard.approvals.transitions import Clock, TransitionStore, to_micros
from guard.pgconnect import pg_connect_args

DEFAULT_TABLE_PREFIX = "shadowguard_"
_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")
_WRITE = "shadowguard_write"
_BUSY_TIMEOUT_S = 30.0
_PG_CREATE_LOCK = 0x5347_4150  # any fixed key: serialises table creation between replicas starting at once


def _tables(prefix: str) -> tuple[sa.MetaData, sa.Table, sa.Table]:
    metadata = sa.MetaData()
    approvals = sa.Table(
        f"{prefix}approvals",
        metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("principal", sa.String, nullable=True),
        sa.Column("tool", sa.String, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.Column("used_at", sa.BigInteger, nullable=True),
        sa.Column("data", sa.Text, nullable=False),
        sa.Index(f"ix_{prefix}approvals_state_expires", "state", "expires_at"),
        sa.Index(f"ix_{prefix}approvals_created", "created_at", "id"),
        sa.Index(f"ix_{prefix}approvals_session", "session_id"),
        sa.Index(f"ix_{prefix}approvals_principal", "principal"),
        sa.Index(f"ix_{prefix}approvals_tool", "tool"),
    )
    events = sa.Table(
        f"{prefix}approval_events",
        metadata,
        sa.Column(
            "seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("approval_id", sa.String(64), sa.ForeignKey(approvals.c.id), nullable=False, index=True),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    return metadata, approvals, events


class SqlApprovalStore(TransitionStore):
    """Approvals in a SQL database; safe across processes and replicas sharing the database.

    ``url`` is a SQLAlchemy URL: ``sqlite:///file.db`` (relative paths resolve against ``base_dir``,
    default the working directory) or ``postgresql://...``. A ``table_prefix=...`` query parameter
    (default ``shadowguard_``) names the tables, so that several queues (or test runs) share a database.
    In-memory SQLite is refused: a queue that vanishes with the process is not durable, nor shared.

    Raises :class:`ValueError` for a URL it cannot use and :class:`ApprovalStoreUnavailable` when the
    database cannot be reached or the tables cannot be created.
    """

    _unreachable = (sa.exc.DBAPIError, sa.exc.TimeoutError)
    """Every error of the database or its driver (the store reaches the driver only through SQLAlchemy,
    which wraps each one in a ``DBAPIError``; a broken connection shows as an OperationalError, an
    InterfaceError or a ProgrammingError: "can't change 'autocommit' now: connection in transaction
    status ACTIVE"), and the pool's timeout: the store is unavailable,
    nothing was changed (every write is one transaction). The connection that failed is discarded
    (:func:`_engine`'s ``handle_error``), so the next use opens a new one."""

    def __init__(self, url: str, *, clock: Clock = utcnow, base_dir: Path | None = None) -> None:
        super().__init__(clock)
        parsed, self.table_prefix, self.url = _parse(url, base_dir)
        self._metadata, self._approvals, self._events_table = _tables(self.table_prefix)
        self._engine = _engine(parsed)
        self._writer = self._engine.execution_options(**{_WRITE: True})
        with self._opening(), self._writer.begin() as conn:
            if self._engine.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_CREATE_LOCK)))
            self._metadata.create_all(conn, checkfirst=True)

    def close(self) -> None:
        self._engine.dispose()

    def drop_tables(self) -> None:
        """Drop this store's tables (test teardown; the queue and its audit trail are gone)."""
        with self._unavailable("drop tables of"), self._writer.begin() as conn:
            self._metadata.drop_all(conn, checkfirst=True)

    # -- primitives --------------------------------------------------------------------------------

    def _load(self, approval_id: str) -> Approval | None:
        t = self._approvals
        with self._unavailable("read"), self._engine.connect() as conn:
            data = conn.execute(sa.select(t.c.data).where(t.c.id == approval_id)).scalar()
        return None if data is None else Approval.model_validate_json(data)

    def _insert(self, approval: Approval, event: ApprovalEvent) -> None:
        with self._unavailable("write"), self._writer.begin() as conn:
            conn.execute(self._approvals.insert().values(**self._row(approval)))
            conn.execute(self._events_table.insert().values(**self._event_row(event)))

    def _swap(
        self, before: Approval, after: Approval, event: ApprovalEvent, *, now: int, due: bool, unused: bool
    ) -> bool:
        t = self._approvals
        conditions = [t.c.id == before.id, t.c.state == before.state.value]
        conditions.append(t.c.expires_at <= now if due else t.c.expires_at > now)
        if unused:
            conditions.append(t.c.used_at.is_(None))
        row = self._row(after)
        update = (
            t.update().where(*conditions).values(state=row["state"], used_at=row["used_at"], data=row["data"])
        )
        with self._unavailable("write"), self._writer.begin() as conn:
            if conn.execute(update).rowcount != 1:
                return False
            conn.execute(self._events_table.insert().values(**self._event_row(event)))
        return True

    def _due_ids(self, now: int) -> list[str]:
        t = self._approvals
        query = sa.select(t.c.id).where(t.c.state == ApprovalState.PENDING.value, t.c.expires_at <= now)
        with self._unavailable("read"), self._engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def _select(self, query: ApprovalQuery) -> list[Approval]:
        t = self._approvals
        select = sa.select(t.c.data)
        if query.states is not None:
            select = select.where(t.c.state.in_([state.value for state in query.states]))
        for column, value in (
            (t.c.session_id, query.session_id),
            (t.c.principal, query.principal),
            (t.c.tool, query.tool),
        ):
            if value is not None:
                select = select.where(column == value)
        select = select.order_by(t.c.created_at.desc(), t.c.id.desc()).limit(query.limit).offset(query.offset)
        with self._unavailable("read"), self._engine.connect() as conn:
            rows: list[str] = list(conn.execute(select).scalars())
        return [Approval.model_validate_json(data) for data in rows]

    def _events(self, approval_id: str) -> list[ApprovalEvent]:
        e = self._events_table
        query = sa.select(e.c.data).where(e.c.approval_id == approval_id).order_by(e.c.seq)
        with self._unavailable("read"), self._engine.connect() as conn:
            rows: list[str] = list(conn.execute(query).scalars())
        return [ApprovalEvent.model_validate_json(data) for data in rows]

    # -- helpers -----------------------------------------------------------------------------------

    @staticmethod
    def _row(approval: Approval) -> dict[str, Any]:
        return {
            "id": approval.id,
            "state": approval.state.value,
            "session_id": approval.session_id,
            "principal": approval.principal,
            "tool": approval.tool,
            "created_at": to_micros(approval.created_at),
            "expires_at": to_micros(approval.expires_at),
            "used_at": None if approval.used_at is None else to_micros(approval.used_at),
            "data": approval.model_dump_json(),
        }

    @staticmethod
    def _event_row(event: ApprovalEvent) -> dict[str, Any]:
        return {
            "approval_id": event.approval_id,
            "action": event.action,
            "at": to_micros(event.at),
            "data": event.model_dump_json(),
        }

    @staticmethod
    def _cause(exc: Exception) -> str:
        orig = getattr(exc, "orig", None)
        return " ".join(str(exc if orig is None else orig).split())


def _parse(url: str, base_dir: Path | None) -> tuple[sa.URL, str, str]:
    """The engine's URL, the table prefix, and the URL as given for messages (without its password)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"not a database URL: {url!r} ({exc})") from exc
    shown = parsed.render_as_string(hide_password=True)
    prefix = parsed.query.get("table_prefix", DEFAULT_TABLE_PREFIX)
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(
            f"approval store {shown}: table_prefix must be a letter or _ then up to 39 letters, digits or _"
        )
    parsed = parsed.difference_update_query(["table_prefix"])
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database
        if not database or database == ":memory:" or database.startswith("file::memory:"):
            raise ValueError(
                f"approval store {shown}: in-memory SQLite is not durable nor shared between processes;"
                " name a file, e.g. sqlite:///shadowguard-approvals.db"
            )
        path = Path(database)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
            shown = f"{shown} (file {path})"
        parsed = parsed.set(database=str(path))
    elif backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
    else:
        raise ValueError(
            f"approval store {shown}: unsupported database {backend!r}; use sqlite or postgresql"
        )
    return parsed, prefix, shown


def _engine(url: sa.URL) -> sa.Engine:
    """The store's engine. Any DBAPI error marks its connection as disconnected, so the pool discards it
    (a pre-ping that fails in any way, too: the pool then opens a new connection): a connection left
    mid-query or broken by an outage is never handed out again. On PostgreSQL every wait is bounded
    (guard.pgconnect): a server that stops answering is unavailable, not a hang."""
    if url.get_backend_name() != "sqlite":
        engine = sa.create_engine(url, pool_pre_ping=True, connect_args=pg_connect_args(url))
    else:
        engine = _sqlite_engine(url)

    @sa.event.listens_for(engine, "handle_error")
    def _discard(context: sa.engine.ExceptionContext) -> None:
        context.is_disconnect = True

    return engine


def _sqlite_engine(url: sa.URL) -> sa.Engine:
    engine = sa.create_engine(url, connect_args={"timeout": _BUSY_TIMEOUT_S, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi: Any, _record: Any) -> None:
        # pysqlite's implicit transactions cannot BEGIN IMMEDIATE; turn them off and begin ourselves.
        dbapi.isolation_level = None
        dbapi.execute("PRAGMA journal_mode = WAL")
        dbapi.execute("PRAGMA foreign_keys = ON")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")

    return engine
