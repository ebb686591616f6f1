"""SQL storage of one environment's state (SQLAlchemy Core; SQLite in memory or PostgreSQL).

Every table of a domain becomes a SQL table with one column per model field, holding the value's
pydantic JSON-mode rendering (so the state hash can be computed from the columns without loss):

    float -> DOUBLE          int -> BIGINT          bool -> BOOLEAN
    str / enum -> TEXT       Decimal -> TEXT (keeps its scale, e.g. "890.00")
    datetime / date -> TEXT  (ISO text, "Z" for UTC, naive stays naive)
    list -> JSON

Two bookkeeping columns keep the reference's list semantics: ``_seq`` (store order; an upsert keeps
the row's place) and ``_key`` (the model's ``get_id()`` as text). Each attempt gets its own database:
on SQLite an in-memory database restored from a per-domain template (on a pooled connection: see
:meth:`Database.open`), on PostgreSQL a pooled schema holding the defaults; either is used inside one
transaction that is rolled back when the attempt ends.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.pool import Pool, QueuePool, StaticPool

from benchmark.envs.schema import TableSpec
from guard.sqlite_capture import capture_active, ensure_capture

_COLUMN_TYPES: dict[str, Any] = {
    "str": sa.Text,
    "enum": sa.Text,
    "Decimal": sa.Text,
    "datetime": sa.Text,
    "date": sa.Text,
    "int": sa.BigInteger,
    "float": sa.Double,
    "bool": sa.Boolean,
    "list": sa.JSON,
}


@dataclass(frozen=True)
class _Compiled:
    sql: str
    defaults: dict[str, Any]
    positional: tuple[str, ...] | None
    converters: list[tuple[int, Any]]
    binds: list[tuple[str, Any]]


# Compiled read queries per (SQL table, dialect, query shape), shared by all attempts.
_COMPILED: dict[tuple[Any, ...], _Compiled] = {}

SEQ = "_seq"
KEY = "_key"

SQLITE_IDLE_PER_DOMAIN = 4
"""How many idle SQLite attempt connections a :class:`Database` keeps per domain (more may be open
at once; those past this number are closed when their attempt ends)."""
_RESTORED = "shadowguard.envs.restored"
"""Connection info key: the connection holds the template and the capture objects (set once)."""
_COMMITTED = "shadowguard.envs.committed"
"""Connection info key: something was committed on the connection during this attempt."""


def build_metadata(tables: Sequence[TableSpec]) -> tuple[sa.MetaData, dict[str, sa.Table]]:
    """SQL tables for a domain's TableSpecs."""
    metadata = sa.MetaData()
    out: dict[str, sa.Table] = {}
    for spec in tables:
        columns: list[sa.Column[Any]] = [
            sa.Column(SEQ, sa.Integer, primary_key=True, autoincrement=False),
            sa.Column(KEY, sa.Text, nullable=True, index=True),
        ]
        columns += [sa.Column(f.name, _COLUMN_TYPES[f.kind], nullable=True) for f in spec.fields]
        out[spec.name] = sa.Table(spec.name, metadata, *columns)
    return metadata, out


class SqlState:
    """One attempt's tables on one open connection, inside one transaction.

    Rows go in and come out as JSON-mode dicts in model field order. The caller owns validation.
    """

    def __init__(
        self,
        connection: sa.Connection,
        specs: Mapping[str, TableSpec],
        tables: Mapping[str, sa.Table],
        initial: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        """``initial``: the rows the database was opened with, so untouched tables need no lookups."""
        self.connection = connection
        self.specs = specs
        self.tables = tables
        self._next_seq: dict[str, int] = {}
        self._initial_keys: dict[str, dict[str, int]] = {}
        self.written: set[str] = set()
        """Tables a write went to through this state (a rolled-back write included), so a reader
        of the whole state may keep what it read before of the others."""
        for name, rows in (initial or {}).items():
            self._next_seq[name] = len(rows)
            keys: dict[str, int] = {}
            for seq, row in enumerate(rows):
                keys.setdefault(specs[name].key(row), seq)
            self._initial_keys[name] = keys

    # -- reads --------------------------------------------------------------------------------
    # Reads are the hot path of tools and of the hash: each query shape is compiled once per dialect
    # and run on the DBAPI cursor, applying the result conversions SQLAlchemy would apply.
    def _compiled(self, table: str, shape: tuple[Any, ...]) -> _Compiled:
        t = self.tables[table]
        dialect = self.connection.dialect
        cache_key = (t, dialect.name, shape)
        compiled = _COMPILED.get(cache_key)
        if compiled is None:
            kind, columns = shape
            names = self.specs[table].field_names
            if kind == "count":
                stmt: sa.Select[Any] = sa.select(sa.func.count()).select_from(t)
                selected: tuple[str, ...] = ()
            elif kind == "has":
                stmt = sa.select(t.c[SEQ]).where(t.c[KEY] == sa.bindparam("p_key")).limit(1)
                selected = ()
            else:
                stmt = sa.select(*(t.c[n] for n in names)).order_by(t.c[SEQ])
                for i, column in enumerate(columns):
                    stmt = stmt.where(t.c[column] == sa.bindparam(f"p{i}", type_=t.c[column].type))
                if kind == "key":
                    stmt = stmt.where(t.c[KEY] == sa.bindparam("p_key")).limit(1)
                selected = names
            result = stmt.compile(dialect=dialect)
            converters = []
            for i, name in enumerate(selected):
                processor = t.c[name].type.result_processor(dialect, None)
                if processor is not None:
                    converters.append((i, processor))
            binds = []
            for i, column in enumerate(columns):
                binds.append((f"p{i}", t.c[column].type.bind_processor(dialect)))
            compiled = _COMPILED[cache_key] = _Compiled(
                sql=result.string,
                defaults=dict(result.params),
                positional=tuple(result.positiontup) if result.positiontup else None,
                converters=converters,
                binds=binds,
            )
        return compiled

    def _fetch(self, table: str, shape: tuple[Any, ...], params: dict[str, Any]) -> list[Any]:
        compiled = self._compiled(table, shape)
        params = {**compiled.defaults, **params}
        for name, processor in compiled.binds:
            if processor is not None:
                params[name] = processor(params[name])
        args: Any = params if compiled.positional is None else [params[n] for n in compiled.positional]
        cursor = self.connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(compiled.sql, args)
            fetched = cursor.fetchall()
        finally:
            cursor.close()
        if not compiled.converters:
            return list(fetched)
        out = []
        for raw in fetched:
            values = list(raw)
            for i, convert in compiled.converters:
                values[i] = convert(values[i])
            out.append(values)
        return out

    def _dicts(self, table: str, fetched: list[Any]) -> list[dict[str, Any]]:
        names = self.specs[table].field_names
        return [dict(zip(names, r, strict=True)) for r in fetched]

    def rows(self, table: str) -> list[dict[str, Any]]:
        """All rows in store order."""
        return self._dicts(table, self._fetch(table, ("all", ()), {}))

    def rows_where(self, table: str, **equals: Any) -> list[dict[str, Any]]:
        """Rows whose stored values equal the given ones, in store order."""
        columns = tuple(equals)
        params = {f"p{i}": equals[c] for i, c in enumerate(columns)}
        return self._dicts(table, self._fetch(table, ("where", columns), params))

    def by_key(self, table: str, key: str) -> dict[str, Any] | None:
        rows = self._dicts(table, self._fetch(table, ("key", ()), {"p_key": key}))
        return rows[0] if rows else None

    def count(self, table: str) -> int:
        return int(self._fetch(table, ("count", ()), {})[0][0])

    def has_key(self, table: str, key: str) -> bool:
        return bool(self._fetch(table, ("has", ()), {"p_key": key}))

    # -- writes -------------------------------------------------------------------------------
    def _seq_after_last(self, table: str) -> int:
        if table not in self._next_seq:
            t = self.tables[table]
            last: int | None = self.connection.execute(sa.select(sa.func.max(t.c[SEQ]))).scalar_one()
            self._next_seq[table] = 0 if last is None else int(last) + 1
        seq = self._next_seq[table]
        self._next_seq[table] = seq + 1
        return seq

    def append_many(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        self.written.add(table)
        self._initial_keys.pop(table, None)
        spec = self.specs[table]
        values = [{**row, SEQ: self._seq_after_last(table), KEY: spec.key(row)} for row in rows]
        if values:
            self.connection.execute(self.tables[table].insert(), values)

    def append(self, table: str, row: Mapping[str, Any]) -> None:
        self.append_many(table, [row])

    def replace(self, table: str, key: str, row: Mapping[str, Any]) -> bool:
        """Replace the first row with this key, in place. False when no row has the key."""
        self.written.add(table)
        self._initial_keys.pop(table, None)
        t = self.tables[table]
        first = self.connection.execute(
            sa.select(t.c[SEQ]).where(t.c[KEY] == key).order_by(t.c[SEQ]).limit(1)
        ).first()
        if first is None:
            return False
        values = {**row, KEY: self.specs[table].key(row)}
        self.connection.execute(t.update().where(t.c[SEQ] == first[0]).values(values))
        return True

    def upsert(self, table: str, row: Mapping[str, Any]) -> None:
        """The reference's data-patch semantics: replace in place by key, else append."""
        self.upsert_many(table, [row])

    def upsert_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Upsert rows in order: each replaces the first row with its key in place, else is appended."""
        if not rows:
            return
        self.written.add(table)
        t = self.tables[table]
        spec = self.specs[table]
        first_seq: dict[str, int] = dict(self._initial_keys.pop(table, {}))
        if not first_seq:
            for stored_key, stored_seq in self.connection.execute(
                sa.select(t.c[KEY], t.c[SEQ]).order_by(t.c[SEQ])
            ):
                first_seq.setdefault(str(stored_key), cast(int, stored_seq))
        appended: list[dict[str, Any]] = []
        for row in rows:
            key = spec.key(row)
            if key in first_seq:
                seq = first_seq[key]
                pending = next((a for a in appended if a[SEQ] == seq), None)
                if pending is not None:
                    pending.update(row)
                else:
                    self.connection.execute(t.update().where(t.c[SEQ] == seq).values({**row, KEY: key}))
            else:
                value = {**row, SEQ: self._seq_after_last(table), KEY: key}
                first_seq[key] = value[SEQ]
                appended.append(value)
        if appended:
            self.connection.execute(t.insert(), appended)

    def delete(self, table: str, key: str) -> bool:
        """Delete the first row with this key. False when no row has the key."""
        self.written.add(table)
        self._initial_keys.pop(table, None)
        t = self.tables[table]
        first = self.connection.execute(
            sa.select(t.c[SEQ]).where(t.c[KEY] == key).order_by(t.c[SEQ]).limit(1)
        ).first()
        if first is None:
            return False
        self.connection.execute(t.delete().where(t.c[SEQ] == first[0]))
        return True

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every table's rows, in store order (the reference's ``to_state_dict()``)."""
        return {name: self.rows(name) for name in self.specs}


def _sqlite_engine(creator: Any, poolclass: type[Pool], **pool: Any) -> sa.Engine:
    """An engine handing out raw connections from ``creator``, with real BEGIN/SAVEPOINT handling.

    pysqlite's own implicit transactions break SAVEPOINT (SQLAlchemy docs, "Serializable isolation /
    Savepoints / Transactional DDL"); the documented fix is to disable them and emit BEGIN ourselves.
    """

    def connect() -> sqlite3.Connection:
        raw: sqlite3.Connection = creator()
        raw.isolation_level = None
        return raw

    engine = sa.create_engine("sqlite://", creator=connect, poolclass=poolclass, **pool)

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


class Database:
    """Where environments keep their state: a SQLAlchemy URL, SQLite in memory by default.

    ``open`` returns a fresh, isolated database holding the given default rows.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or "sqlite://"
        self.dialect = sa.make_url(self.url).get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {self.url!r}: use sqlite:// or postgresql://")
        if self.dialect == "sqlite" and sa.make_url(self.url).database not in (None, "", ":memory:"):
            raise ValueError("file-based SQLite is not supported for environments; use sqlite:// (in memory)")
        self._engine: sa.Engine | None = None
        self._lock = threading.Lock()
        self._pg_free: dict[int, list[str]] = {}
        self._pg_schemas: list[str] = []
        self._sqlite: dict[int, tuple[sqlite3.Connection, sa.Engine]] = {}
        """Per domain: the template holding the defaults, and the pool of attempt connections."""

    def _pg_engine(self) -> sa.Engine:
        if self._engine is None:
            url = sa.make_url(self.url)
            if url.drivername == "postgresql":
                url = url.set(drivername="postgresql+psycopg")
            self._engine = sa.create_engine(url, pool_size=4, max_overflow=8)
        return self._engine

    def open(
        self,
        domain_id: int,
        metadata: sa.MetaData,
        defaults: Mapping[str, Sequence[Mapping[str, Any]]],
        load: Any,
    ) -> tuple[sa.Connection, Any]:
        """A new connection (inside a transaction) on a new database with the defaults loaded.

        ``load(connection)`` inserts the defaults; for SQLite it runs once per domain into a template
        that every attempt copies.
        """
        if self.dialect == "sqlite":
            return self._open_sqlite(domain_id, metadata, load), None
        return self._open_pg(domain_id, metadata, load)

    def _sqlite_domain(
        self, domain_id: int, metadata: sa.MetaData, load: Any
    ) -> tuple[sqlite3.Connection, sa.Engine]:
        """The domain's template (built by ``load`` on first use) and its pool of attempt connections.

        One engine per domain (statement compilation is cached per engine), handing out in-memory
        connections from a pool that keeps up to :data:`SQLITE_IDLE_PER_DOMAIN` idle ones. A commit
        on one of them is recorded, so that :meth:`close` does not return it to the pool.
        """
        with self._lock:
            got = self._sqlite.get(domain_id)
            if got is None:
                template = sqlite3.connect(":memory:", check_same_thread=False)
                with _sqlite_engine(lambda: template, StaticPool).begin() as conn:
                    metadata.create_all(conn, checkfirst=False)
                    load(conn)
                engine = _sqlite_engine(
                    lambda: sqlite3.connect(":memory:", check_same_thread=False),
                    QueuePool,
                    pool_size=SQLITE_IDLE_PER_DOMAIN,
                    max_overflow=-1,
                )

                @sa.event.listens_for(engine, "commit")
                def _committed(conn: sa.Connection) -> None:
                    conn.info[_COMMITTED] = True

                got = self._sqlite[domain_id] = (template, engine)
        return got

    def _open_sqlite(self, domain_id: int, metadata: sa.MetaData, load: Any) -> sa.Connection:
        """An attempt on SQLite: a pooled in-memory connection holding exactly the domain's template.

        A new connection gets a copy of the template (``sqlite3`` backup, page for page) and the
        guard's capture log and gated triggers (TEMP objects, ``guard/sqlite_capture.py``), created
        here, outside any transaction, so that no attempt's rollback removes them: a guarded
        session finds them in place instead of creating them (66 statements on retail) per attempt.
        A pooled connection needs nothing: every attempt on it ran inside one transaction that
        :meth:`close` rolled back, which restores its main database to the template's pages and
        leaves the capture log empty (it is written only inside attempts). A connection on which
        anything was committed is never pooled again.
        """
        template, engine = self._sqlite_domain(domain_id, metadata, load)
        conn = engine.connect()
        try:
            if not conn.info.get(_RESTORED):
                raw = conn.connection.dbapi_connection
                assert isinstance(raw, sqlite3.Connection)
                template.backup(raw)
                ensure_capture(conn, metadata.sorted_tables)
                conn.info[_RESTORED] = True
            conn.begin()
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        return conn

    def _open_pg(self, domain_id: int, metadata: sa.MetaData, load: Any) -> tuple[sa.Connection, Any]:
        """An attempt on PostgreSQL: a pooled schema holding the committed defaults, used inside one
        transaction that is always rolled back, so the next attempt finds the defaults untouched.

        A schema serves one attempt at a time (checked out from the pool), so attempts never see or
        lock each other's rows. Creating a schema (DDL + defaults) happens once per pool slot.
        """
        engine = self._pg_engine()
        with self._lock:
            free = self._pg_free.setdefault(domain_id, [])
            schema = free.pop() if free else None
        if schema is None:
            schema = f"sg_{uuid.uuid4().hex[:16]}"
            with engine.begin() as setup:
                setup.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
                setup.execute(sa.text(f'SET LOCAL search_path TO "{schema}"'))
                metadata.create_all(setup, checkfirst=False)
                load(setup)
            with self._lock:
                self._pg_schemas.append(schema)
        conn = engine.connect()
        conn.begin()
        # Transaction-scoped: every statement of this attempt, SQLAlchemy's or raw, resolves here.
        conn.execute(sa.text(f'SET LOCAL search_path TO "{schema}"'))
        return conn, (domain_id, schema)

    def close(self, conn: sa.Connection, handle: Any) -> None:
        """End an attempt: nothing it did is kept (PostgreSQL returns its schema to the pool).

        A SQLite connection goes back to its pool only when the rollback restored the template (nothing
        was committed on it) and no guard session is left capturing on it (one that began and never
        ended); otherwise it is closed, so the next attempt inherits neither.
        """
        try:
            conn.rollback()
            if self.dialect == "sqlite" and (conn.info.pop(_COMMITTED, False) or capture_active(conn)):
                conn.invalidate()
        except BaseException:
            conn.invalidate()
            raise
        finally:
            conn.close()
        if handle is not None:
            domain_id, schema = handle
            with self._lock:
                self._pg_free.setdefault(domain_id, []).append(schema)

    def dispose(self) -> None:
        """Release everything; on PostgreSQL the pooled schemas are dropped."""
        if self._pg_schemas and self._engine is not None:
            with self._engine.begin() as conn:
                for schema in self._pg_schemas:
                    conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        self._pg_schemas.clear()
        self._pg_free.clear()
        for template, engine in self._sqlite.values():
            engine.dispose()
            template.close()
        self._sqlite.clear()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
