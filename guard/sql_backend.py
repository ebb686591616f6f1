"""SqlBackend: shadow transactions on SQLAlchemy (SQLite, PostgreSQL) with trigger-captured changes.

Row changes are captured by the database itself: an AFTER INSERT/UPDATE/DELETE row trigger on every
watched table appends the before/after row images to a change log inside the same transaction. A
savepoint rollback therefore removes the changes it undid, and :meth:`changes` is exact whatever code
wrote the rows (the tool's ORM, raw SQL, cascades).

* SQLite: TEMP triggers and a TEMP log table, private to the connection, installed once per DBAPI
  connection and table set and gated per session (``guard/sqlite_capture.py``).
* PostgreSQL: one PL/pgSQL capture function and a trigger per table, installed once per schema and
  table set (``guard/pg_capture.py``), in a short transaction of their own *before* the session's
  transaction begins, and left in place. The trigger logs only in transactions that set
  ``shadowguard.capture`` (``set_config(..., true)``, transaction-local), into a TEMP log table of
  the session's own (``ON COMMIT DROP``). So sessions take no DDL locks, do not queue behind each
  other, and a writer that is not a shadow session is not logged (issue 15).
"""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlglot import exp

from guard.backend import BackendError
from guard.models import ChangeSet, Op, RowChange
from guard.pg_capture import CAPTURE_SETTING, ensure_capture_triggers
from guard.sqlite_capture import LOG, ConnectionCapture, connection_capture, ensure_capture
from guard.sqltext import parse_select, transpile

LOCK_TIMEOUT_S = 0.25
"""How long a statement of a shadow transaction waits for a lock another transaction holds before it
fails (SQLite ``busy_timeout``, PostgreSQL ``lock_timeout``). Short on purpose: the waiter holds a
server thread while it waits, and the guard retries the call with backoff (docs/adr/009)."""
KeyFn = Callable[[Mapping[str, Any]], str]


@functools.lru_cache(maxsize=1024)
def _prepared(sql: str, dialect: str) -> str:
    """Validated (single read-only SELECT) and transpiled to the driver's own parameter style.

    psycopg reads ``%`` as a parameter marker, so literal percent signs are doubled for PostgreSQL.
    """
    tree = parse_select(sql, None)
    if dialect == "postgresql":
        tree = tree.transform(
            lambda n: (
                exp.Literal.string(n.this.replace("%", "%%"))
                if isinstance(n, exp.Literal) and n.is_string
                else n
            )
        )
    return transpile(tree, dialect)


def _primary_key(table: sa.Table) -> KeyFn:
    names = [c.name for c in table.primary_key.columns]
    if not names:
        raise BackendError(f"table {table.name} has no primary key; pass a key function")
    return lambda row: ":".join(str(row.get(n)) for n in names)


def concurrent_writers(dialect: str) -> int | None:
    """How many transactions on one database can hold uncommitted writes at once, for a participant
    to advertise (``TransactionParticipant(writers=...)``): SQLite has one write lock per database
    file, and refuses it at once, whatever ``busy_timeout``, to a transaction that has already read;
    None: no such limit (PostgreSQL locks rows)."""
    return 1 if dialect == "sqlite" else None


class SqlBackend:
    """Shadow transaction on one SQLAlchemy connection.

    ``tables`` are the watched tables. ``keys`` maps a table name to the function giving a row's key
    (default: its primary key columns). ``hidden`` columns are bookkeeping, left out of row images.
    If the connection is already inside a transaction (e.g. a benchmark environment), the session
    runs in a savepoint of it and :meth:`commit` releases that savepoint. ``lock_timeout_s`` bounds
    every lock wait of the session's statements (None: the connection's own setting; it is set on
    the connection for SQLite, for the transaction on PostgreSQL).
    """

    transactional = True

    def __init__(
        self,
        connection: sa.Connection,
        tables: Sequence[sa.Table],
        *,
        keys: Mapping[str, KeyFn] | None = None,
        hidden: Collection[str] = (),
        lock_timeout_s: float | None = LOCK_TIMEOUT_S,
    ) -> None:
        if lock_timeout_s is not None and lock_timeout_s < 0:
            raise ValueError(f"lock_timeout_s must be >= 0, got {lock_timeout_s}")
        self.lock_timeout_s = lock_timeout_s
        self.connection = connection
        self.tables = {t.name: t for t in tables}
        self.keys = {name: (keys or {}).get(name) or _primary_key(t) for name, t in self.tables.items()}
        self.hidden = frozenset(hidden)
        self.dialect = connection.dialect.name
        self._outer: sa.Transaction | None = None
        self._session: sa.NestedTransaction | None = None
        self._savepoints: dict[str, tuple[sa.NestedTransaction | None, int]] = {}
        """Open savepoint -> (SQLAlchemy's nested transaction, None on SQLite: :meth:`_sqlite_point`;
        the change log's position when it opened)."""
        self._names = itertools.count(1)
        self._begin_mark = 0
        self._log = LOG if self.dialect == "sqlite" else f"pg_temp.{LOG}"
        # Built once: a new text() per call is parsed for its binds and keyed for the compiled cache
        # anew (issue 18: a participant runs both for every watched read). On SQLite the same text
        # runs on the DBAPI connection (:meth:`_read_log`).
        self._mark_sql = sa.text(f"SELECT COALESCE(MAX(id), 0) FROM {self._log}")  # noqa: S608 - constant table name
        self._after_sql = sa.text(
            f"SELECT tbl, op, before, after FROM {self._log} WHERE id > :mark ORDER BY id"  # noqa: S608
        )
        self._capturing: tuple[ConnectionCapture, tuple[str, ...]] | None = None
        """The SQLite capture tags this session turned on (``guard/sqlite_capture.py``)."""
        self._quiet: tuple[int, int] | None = None
        """The last :meth:`position` and SQLite's count of rows this connection had changed then."""
        self._float_columns = {
            name: {c.name for c in t.columns if isinstance(c.type, sa.Float | sa.Double)}
            for name, t in self.tables.items()
        }
        self._bool_columns = {
            name: {c.name for c in t.columns if isinstance(c.type, sa.Boolean)}
            for name, t in self.tables.items()
        }

    # -- lifecycle ------------------------------------------------------------------------------
    def begin(self) -> None:
        if self._session is not None:
            raise BackendError("session already begun")
        opened = None
        if self.dialect == "postgresql":
            # Before the session's transaction (in the caller's, if one is open): the triggers'
            # DDL must not hold table locks for the session's life.
            ensure_capture_triggers(self.connection, list(self.tables), self.lock_timeout_s)
        if not self.connection.in_transaction():
            opened = self._outer = self.connection.begin()
        try:
            if self.lock_timeout_s is not None:
                millis = round(self.lock_timeout_s * 1000)
                if self.dialect == "sqlite":
                    self.connection.exec_driver_sql(f"PRAGMA busy_timeout = {millis}")
                elif self.dialect == "postgresql":
                    self.connection.exec_driver_sql(f"SET LOCAL lock_timeout = {millis}")
            self._install()
            self._session = self.connection.begin_nested()
        except BaseException:
            # A failed statement (e.g. a lock wait past lock_timeout while installing the capture
            # triggers) aborts a PostgreSQL transaction: end the one begun here, so the next begin
            # starts clean instead of failing with "current transaction is aborted" (issue 15).
            if self.dialect == "sqlite":
                self._uninstall()
            if opened is not None:
                opened.rollback()
                self._outer = None
            raise
        self._begin_mark = self._mark()

    def _require(self) -> None:
        if self._session is None:
            raise BackendError("no session: call begin() first")

    def commit(self) -> None:
        self._require()
        assert self._session is not None
        if self.dialect == "sqlite":
            # The session's log rows go with it: the next session's marks start from an empty log.
            self.connection.exec_driver_sql(f"DELETE FROM temp.{LOG}")  # noqa: S608 - constant table name
        self._session.commit()
        self._session = None
        self._quiet = None
        self._savepoints.clear()
        self._uninstall()
        if self._outer is not None:
            self._outer.commit()
            self._outer = None

    def rollback(self) -> None:
        self._require()
        assert self._session is not None
        if self._savepoints:
            # Innermost first, so that SQLAlchemy's stack of nested transactions stays in step.
            self._close(min(self._savepoints, key=lambda n: int(n[2:])), keep=False)
        self._session.rollback()
        self._session = None
        self._quiet = None
        self._savepoints.clear()
        if self._outer is None:
            self._uninstall()
            return
        self._outer.rollback()
        self._outer = None
        if self.dialect == "sqlite":
            self._uninstall()

    # -- savepoints -----------------------------------------------------------------------------
    def savepoint(self) -> str:
        self._require()
        name = f"sp{next(self._names)}"
        if self.dialect == "sqlite":
            self._sqlite_point("SAVEPOINT", name)
            self._savepoints[name] = (None, self._mark())
        else:
            self._savepoints[name] = (self.connection.begin_nested(), self._mark())
        return name

    def _sqlite_point(self, verb: str, name: str) -> None:
        """``SAVEPOINT``, ``RELEASE`` or ``ROLLBACK TO`` one of this session's savepoints on SQLite,
        on the DBAPI connection: ``begin_nested`` names each savepoint anew, so SQLAlchemy compiled two
        new statements per guarded call (about 60 µs, against 3 µs here; issue 18). They nest inside
        the session's own nested transaction, which SQLAlchemy keeps; a tool's own ``begin_nested``
        inside one nests in it as before. A database error is raised as the one SQLAlchemy raises."""
        # The name is this backend's own: two backends on one connection do not share one.
        self._sqlite_rows(f'{verb} "sg{id(self):x}_{name}"', {})

    def _close(self, savepoint: str, keep: bool) -> None:
        if savepoint not in self._savepoints:
            raise BackendError(f"unknown or closed savepoint {savepoint!r}")
        # Savepoints nest: closing one closes those opened after it, innermost first, so that
        # SQLAlchemy's own stack of nested transactions stays in step with the database's.
        order = sorted(self._savepoints, key=lambda n: int(n[2:]), reverse=True)
        if not keep:
            self._quiet = None  # a rollback lowers the log without moving the count of changed rows
        for name in order[: order.index(savepoint) + 1]:
            nested, _ = self._savepoints.pop(name)
            if nested is None:
                if not keep:
                    self._sqlite_point("ROLLBACK TO", name)
                self._sqlite_point("RELEASE", name)
            elif keep:
                nested.commit()
            else:
                nested.rollback()

    def rollback_to(self, savepoint: str) -> None:
        self._close(savepoint, keep=False)

    def release(self, savepoint: str) -> None:
        self._close(savepoint, keep=True)

    # -- changes --------------------------------------------------------------------------------
    def _change_count(self) -> int | None:
        """SQLite's count of rows this connection changed since it opened; None on other databases."""
        if self.dialect != "sqlite":
            return None
        count = getattr(self.connection.connection.dbapi_connection, "total_changes", None)
        return count if isinstance(count, int) else None

    def _mark(self) -> int:
        ((value,),) = self._read_log(self._mark_sql, {})
        return int(value or 0)

    def _read_log(self, statement: sa.TextClause, params: dict[str, Any]) -> Sequence[Sequence[Any]]:
        """The rows of one read of the change log, in the session's transaction.

        On SQLite it runs on the DBAPI connection, as :meth:`query` does: SQLAlchemy's
        ``execute`` (compiled-cache lookup, execution context, result object) costs tens of µs a
        statement, and a watched read runs one or two (issue 18). A database error is raised as
        the one SQLAlchemy raises for it.
        """
        if self.dialect != "sqlite":
            return self.connection.execute(statement, params).all()
        return self._sqlite_rows(statement.text, params)

    def _dbapi(self) -> DBAPIConnection:
        """The SQLite session's DBAPI connection (the statements SQLAlchemy's machinery would cost
        more than run here, in the same transaction)."""
        raw = self.connection.connection.dbapi_connection
        if raw is None:
            raise BackendError("the SQLite connection is closed")
        return raw

    def _sqlite_rows(self, text: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """One statement on :meth:`_dbapi`, its rows; a database error is raised as the one
        SQLAlchemy raises for it."""
        try:
            rows: list[tuple[Any, ...]] = self._dbapi().execute(text, params).fetchall()
        except sqlite3.Error as exc:
            raise sa.exc.DBAPIError.instance(text, params, exc, sqlite3.Error) from exc
        return rows

    def changes(self, since: str | None = None) -> ChangeSet:
        self._require()
        if since is None:
            mark = self._begin_mark
        else:
            if since not in self._savepoints:
                raise BackendError(f"unknown or closed savepoint {since!r}")
            mark = self._savepoints[since][1]
        return self.changes_after(mark)

    # -- watched reads (guard.backend.Watchable, docs/adr/013) ---------------------------------
    def position(self) -> int:
        """The capture log's position now: what :meth:`changes_after` counts from.

        On SQLite, when the connection has changed no row since the last position was taken (its
        ``total_changes`` unmoved: a log row is written only with a changed row) and this backend has
        rolled nothing back since (a rollback takes log rows away without moving the count, and lets
        their ids be taken again), the log is where it was and is not asked again (issue 18: a
        watched read asked it for every call)."""
        self._require()
        count = self._change_count()
        if count is not None and self._quiet is not None and self._quiet[1] == count:
            return self._quiet[0]
        mark = self._mark()
        self._quiet = (mark, count) if count is not None else None
        return mark

    def changes_after(self, position: int) -> ChangeSet:
        """The row changes logged after ``position`` (from :meth:`position`) and still in effect.

        On SQLite, when ``position`` is the last one taken and the connection has changed no row since
        (its ``total_changes``, which counts every row an INSERT, UPDATE or DELETE changed, those of
        triggers included, and is not lowered by a rollback), the answer is empty without reading the
        log: a logged change is a row the capture triggers inserted, so the count would have moved
        (issue 18: a watched read asked the log after every call)."""
        self._require()
        if self._quiet is not None and self._quiet == (position, self._change_count()):
            return ChangeSet()
        out = []
        for raw_table, raw_op, before, after in self._read_log(self._after_sql, {"mark": position}):
            table, op = str(raw_table), cast(Op, str(raw_op).lower())
            before_row = self._image(table, before)
            after_row = self._image(table, after)
            key_fn = self.keys[table]
            key = key_fn(after_row if after_row is not None else before_row or {})
            if op == "update" and before_row is not None and (old_key := key_fn(before_row)) != key:
                # A row whose key changed is another row as far as a change set is concerned.
                out.append(RowChange(table=table, key=old_key, op="delete", before=before_row))
                out.append(RowChange(table=table, key=key, op="insert", after=after_row))
                continue
            out.append(RowChange(table=table, key=key, op=op, before=before_row, after=after_row))
        return ChangeSet(changes=out)

    def _image(self, table: str, raw: Any) -> dict[str, Any] | None:
        if raw is None:
            return None
        data = json.loads(raw) if isinstance(raw, str) else dict(raw)
        row: dict[str, Any] = {}
        floats, bools = self._float_columns[table], self._bool_columns[table]
        for column in self.tables[table].columns:
            name = column.name
            if name in self.hidden or name not in data:
                continue
            value = data[name]
            if value is not None and name in floats:
                value = float(value)
            elif value is not None and name in bools:
                value = bool(value)
            row[name] = value
        return row

    # -- queries --------------------------------------------------------------------------------
    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """One read-only SELECT (``:name`` parameters); it cannot change the shadow state.

        The text must parse as a single SELECT without a writing clause (checked once per text).
        On PostgreSQL it runs in a savepoint that is always rolled back (a failing or volatile
        statement leaves the session as it was). On SQLite, where a failing SELECT does not end the
        transaction, it runs on the DBAPI connection under ``PRAGMA query_only``: a write it would
        make all the same (a user function that writes) fails, and the query raises.
        """
        self._require()
        text = _prepared(sql, self.dialect)
        if self.dialect == "sqlite":
            return self._query_sqlite(text, dict(params or {}))
        nested = self.connection.begin_nested()
        try:
            result = self.connection.exec_driver_sql(text, dict(params or {}))
            columns = [d[0] for d in result.cursor.description or ()] if result.cursor else []
            return [dict(zip(columns, r, strict=True)) for r in result.fetchall()]
        finally:
            nested.rollback()

    def _query_sqlite(self, text: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        cursor = self._dbapi().cursor()
        try:
            cursor.execute("PRAGMA query_only = ON")
            try:
                cursor.execute(text, params)
                columns = [d[0] for d in cursor.description or ()]
                return [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
            finally:
                cursor.execute("PRAGMA query_only = OFF")
        except sqlite3.Error as exc:
            # The same error a statement through SQLAlchemy raises (e.g. DataError for a bad value).
            raise sa.exc.DBAPIError.instance(text, params, exc, sqlite3.Error) from exc
        finally:
            cursor.close()

    # -- triggers -------------------------------------------------------------------------------
    def _install(self) -> None:
        if self.dialect == "sqlite":
            self._install_sqlite()
        elif self.dialect == "postgresql":
            self._install_postgresql()
        else:
            raise BackendError(f"SqlBackend does not support the {self.dialect} dialect")

    def _uninstall(self) -> None:
        """Stop capturing for this session (SQLite: the triggers stay, gated off; no statement)."""
        if self.dialect == "sqlite":
            capturing, self._capturing = self._capturing, None
            if capturing is not None:
                state, tags = capturing
                state.active.subtract(tags)
        elif self.connection.in_transaction() and self.connection.get_transaction() is not None:
            # Still inside the caller's transaction: stop logging, and drop the session's log.
            self.connection.exec_driver_sql(f"SELECT set_config('{CAPTURE_SETTING}', 'off', true)")
            self.connection.exec_driver_sql(f"DROP TABLE IF EXISTS pg_temp.{LOG}")

    def _install_sqlite(self) -> None:
        tags = ensure_capture(self.connection, list(self.tables.values()))
        state = connection_capture(self.connection)
        state.active.update(tags)
        self._capturing = (state, tags)

    def _install_postgresql(self) -> None:
        """The session's own change log (a TEMP table, gone when the transaction ends), and the
        transaction-local setting that makes the installed triggers log into it."""
        run = self.connection.exec_driver_sql
        run(
            f"CREATE TEMP TABLE IF NOT EXISTS {LOG} "
            "(id BIGSERIAL PRIMARY KEY, tbl TEXT NOT NULL, op TEXT NOT NULL, before JSON, after JSON) "
            "ON COMMIT DROP"
        )
        run(f"SELECT set_config('{CAPTURE_SETTING}', 'on', true)")
