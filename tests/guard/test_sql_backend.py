"""SqlBackend against an in-memory model: random write programs in nested savepoints, SQLite and PostgreSQL.

A program is a tree of insert/update/delete statements (single-row, multi-row, primary-key changing)
grouped into savepoints that are randomly released or rolled back. After every step the tables equal
the model, ``changes()`` netted equals the model's difference from the initial state, and
``changes(sp)`` equals exactly the row changes made since ``sp`` that were not rolled back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.pool import NullPool

from guard.backend import Backend, BackendError
from guard.models import ChangeSet, Op, RowChange
from guard.pg_capture import CAPTURE_SETTING
from guard.sql_backend import SqlBackend
from guard.sqlite_capture import LOG, connection_capture
from guard.sqltext import SqlTextError
from tests.support.guardcore import keyed_table, postgresql_schema, sqlite_memory, text_column
from tests.support.services import pg_engine_url, require_postgres

metadata = sa.MetaData()
items = keyed_table(
    "items",
    metadata,
    text_column("name"),
    sa.Column("price", sa.Float, nullable=True),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.Column("meta", sa.JSON, nullable=True),
)
stock = sa.Table(
    "stock",
    metadata,
    sa.Column("warehouse", sa.Text, primary_key=True),
    sa.Column("sku", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("qty", sa.Integer, nullable=False),
    sa.Column("ratio", sa.Double, nullable=True),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("tags", sa.JSON, nullable=True),
)
TABLES = {"items": items, "stock": stock}
PK = {"items": ("id",), "stock": ("warehouse", "sku")}
WAREHOUSES = ("w1", "w:2", "倉")

Row = dict[str, Any]
Model = dict[str, dict[str, Row]]


def key_of(table: str, row: Row) -> str:
    return ":".join(str(row[n]) for n in PK[table])


# -- strategies -------------------------------------------------------------------------------------
texts = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8)
floats = st.floats(allow_nan=False, allow_infinity=False)
_SQLITE = sqlite3.connect(":memory:", check_same_thread=False)


def _sqlite_parses_exactly(value: float) -> bool:
    """A JSON column holding a bare number is stored as REAL: SQLite parses the JSON text itself, and its
    text-to-double conversion is not correctly rounded (about 1 value in 300 is 1 ulp off, far more near
    the ends of the range). That is the database's doing, before any trigger runs, so such values are
    left out of the model rather than expected to survive."""
    stored = _SQLITE.execute("SELECT CAST(? AS REAL)", (repr(value),)).fetchone()[0]
    return bool(stored == value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | floats.filter(_sqlite_parses_exactly) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
VALUES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "items": {
        "name": texts,
        "price": st.none() | floats,
        "active": st.booleans(),
        "meta": json_values,
    },
    "stock": {
        "qty": st.integers(0, 1000),
        "ratio": st.none() | floats,
        "note": st.none() | texts,
        "tags": json_values,
    },
}
KEYS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "items": st.fixed_dictionaries({"id": st.integers(0, 12)}),
    "stock": st.fixed_dictionaries({"warehouse": st.sampled_from(WAREHOUSES), "sku": st.integers(0, 3)}),
}


def rows(table: str) -> st.SearchStrategy[Row]:
    return st.builds(lambda k, v: {**k, **v}, KEYS[table], st.fixed_dictionaries(VALUES[table]))


def partial_values(table: str) -> st.SearchStrategy[Row]:
    return st.fixed_dictionaries({}, optional=VALUES[table])


# -- databases -------------------------------------------------------------------------------------
def sqlite_connection() -> AbstractContextManager[sa.Connection]:
    """The plain pysqlite engine a user would create; one in-memory database per example."""
    return sqlite_memory(metadata)


def postgresql_connection(engine: sa.Engine) -> AbstractContextManager[sa.Connection]:
    """A throwaway schema per example, dropped afterwards."""
    return postgresql_schema(engine, metadata.create_all)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def connect(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "sqlite":
        yield sqlite_connection
        return
    require_postgres()
    engine = sa.create_engine(pg_engine_url(), poolclass=NullPool)
    yield lambda: postgresql_connection(engine)
    engine.dispose()


# -- the model -------------------------------------------------------------------------------------
@dataclass
class Harness:
    """The backend under test, the model of its tables, and the log of expected row changes.

    ``log`` holds groups: one statement's row changes (a multi-row statement's order is unspecified).
    """

    conn: sa.Connection
    backend: SqlBackend
    initial: Model
    model: Model
    log: list[list[RowChange]] = field(default_factory=list)
    open: list[tuple[str, int, Model]] = field(default_factory=list)
    watches: list[tuple[int, int, int]] = field(default_factory=list)
    """(position, log length, savepoints open) of each watch taken (guard.backend.Watchable)."""

    # writes ---------------------------------------------------------------------------------------
    def insert(self, table: str, row: Row) -> None:
        key = key_of(table, row)
        if key in self.model[table]:
            return
        self.conn.execute(TABLES[table].insert().values(row))
        self.model[table][key] = row
        self.log.append([RowChange(table=table, key=key, op="insert", after=row)])

    def where(self, table: str, key: str) -> Any:
        row = self.model[table][key]
        return sa.and_(*(TABLES[table].c[n] == row[n] for n in PK[table]))

    def update(self, table: str, key: str, values: Row) -> None:
        before = self.model[table][key]
        after = {**before, **values}
        new_key = key_of(table, after)
        if not values or (new_key != key and new_key in self.model[table]):
            return
        self.conn.execute(TABLES[table].update().where(self.where(table, key)).values(values))
        del self.model[table][key]
        self.model[table][new_key] = after
        if new_key == key:
            self.log.append([RowChange(table=table, key=key, op="update", before=before, after=after)])
        else:
            self.log.append(
                [
                    RowChange(table=table, key=key, op="delete", before=before),
                    RowChange(table=table, key=new_key, op="insert", after=after),
                ]
            )

    def delete(self, table: str, key: str) -> None:
        self.conn.execute(TABLES[table].delete().where(self.where(table, key)))
        before = self.model[table].pop(key)
        self.log.append([RowChange(table=table, key=key, op="delete", before=before)])

    def restock(self, warehouse: str, qty: int) -> None:
        """Multi-row UPDATE: every row of a warehouse."""
        group = []
        for key, before in list(self.model["stock"].items()):
            if before["warehouse"] == warehouse:
                after = {**before, "qty": qty}
                self.model["stock"][key] = after
                group.append(RowChange(table="stock", key=key, op="update", before=before, after=after))
        self.conn.execute(stock.update().where(stock.c.warehouse == warehouse).values(qty=qty))
        if group:
            self.log.append(group)

    def drop_sku(self, sku: int) -> None:
        """Multi-row DELETE."""
        group = []
        for key, before in list(self.model["stock"].items()):
            if before["sku"] == sku:
                del self.model["stock"][key]
                group.append(RowChange(table="stock", key=key, op="delete", before=before))
        self.conn.execute(stock.delete().where(stock.c.sku == sku))
        if group:
            self.log.append(group)

    # savepoints -----------------------------------------------------------------------------------
    def savepoint(self) -> None:
        name = self.backend.savepoint()
        self.open.append((name, len(self.log), copy_model(self.model)))

    def watch(self) -> None:
        position = self.backend.position()
        # SQLite reads the log on the DBAPI connection: the same answer as through SQLAlchemy, in the
        # same transaction, after any writes and rollbacks (a rollback lowers it)
        log = LOG if self.conn.dialect.name == "sqlite" else f"pg_temp.{LOG}"
        through_sqlalchemy = self.conn.execute(sa.text(f"SELECT COALESCE(MAX(id), 0) FROM {log}"))
        assert position == through_sqlalchemy.scalar_one()
        self.watches.append((position, len(self.log), len(self.open)))

    def close(self, rollback: bool) -> None:
        name, mark, snapshot = self.open.pop()
        if rollback:
            # a watch taken inside the rolled-back savepoint counts from rows that are gone (ADR 013:
            # a watch spans one call, never a rollback to before it)
            self.watches = [w for w in self.watches if w[2] <= len(self.open)]
            self.backend.rollback_to(name)
            self.model = snapshot
            del self.log[mark:]
        else:
            self.backend.release(name)
        with pytest.raises(BackendError, match="unknown or closed savepoint"):
            self.backend.changes(name)

    # the invariants -------------------------------------------------------------------------------
    def contents(self) -> Model:
        out: Model = {}
        for name, table in TABLES.items():
            found = [dict(r._mapping) for r in self.conn.execute(sa.select(table))]
            out[name] = {key_of(name, r): r for r in found}
        return out

    def check(self) -> None:
        assert self.contents() == self.model
        net = self.backend.changes().net()
        assert {(c.table, c.key): c for c in net} == model_diff(self.initial, self.model)
        assert_same_changes(self.backend.changes(), self.log)
        for name, mark, _ in self.open:
            assert_same_changes(self.backend.changes(name), self.log[mark:])
        for position, mark, _ in self.watches:
            assert_same_changes(self.backend.changes_after(position), self.log[mark:])


def copy_model(model: Model) -> Model:
    return {t: dict(rows) for t, rows in model.items()}


def model_diff(initial: Model, final: Model) -> dict[tuple[str, str], RowChange]:
    out = {}
    for table in TABLES:
        for key in initial[table].keys() | final[table].keys():
            before, after = initial[table].get(key), final[table].get(key)
            if before == after:
                continue
            op: Op = "insert" if before is None else "delete" if after is None else "update"
            out[(table, key)] = RowChange(table=table, key=key, op=op, before=before, after=after)
    return out


def assert_same_changes(actual: ChangeSet, groups: list[list[RowChange]]) -> None:
    found = list(actual)
    assert len(found) == sum(len(g) for g in groups), (found, groups)
    at = 0
    for group in groups:
        chunk = found[at : at + len(group)]
        at += len(group)
        if len(group) == 1:
            assert chunk == group
        else:
            assert sorted(chunk, key=lambda c: c.key) == sorted(group, key=lambda c: c.key)


def run_block(h: Harness, data: st.DataObject, depth: int) -> None:
    steps = ["insert", "update", "delete", "restock", "drop_sku", "watch"] + (
        ["savepoint"] if depth < 3 else []
    )
    for _ in range(data.draw(st.integers(0, 5 if depth else 8), label="steps")):
        step = data.draw(st.sampled_from(steps), label="step")
        table = data.draw(st.sampled_from(sorted(TABLES)), label="table")
        existing = sorted(h.model[table])
        if step == "insert":
            h.insert(table, data.draw(rows(table), label="row"))
        elif step in ("update", "delete") and existing:
            key = data.draw(st.sampled_from(existing), label="key")
            if step == "delete":
                h.delete(table, key)
            else:
                values = data.draw(partial_values(table), label="values")
                if data.draw(st.integers(0, 5), label="rekey") == 0:
                    values.update(data.draw(KEYS[table], label="new key"))
                h.update(table, key, values)
        elif step == "restock":
            h.restock(data.draw(st.sampled_from(WAREHOUSES)), data.draw(st.integers(0, 1000)))
        elif step == "drop_sku":
            h.drop_sku(data.draw(st.integers(0, 3)))
        elif step == "watch":
            h.watch()
        elif step == "savepoint":
            h.savepoint()
            h.check()
            run_block(h, data, depth + 1)
            h.close(rollback=data.draw(st.booleans(), label="rollback"))
        h.check()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_programs_match_the_model(connect: Any, data: st.DataObject) -> None:
    initial: Model = {name: {} for name in TABLES}
    for name in TABLES:
        for row in data.draw(st.lists(rows(name), max_size=4), label=f"initial {name}"):
            initial[name].setdefault(key_of(name, row), row)
    outer = data.draw(st.booleans(), label="caller holds a transaction")
    with connect() as conn:
        for name, table in TABLES.items():
            if initial[name]:
                conn.execute(table.insert(), list(initial[name].values()))
        conn.commit()
        if outer:
            conn.begin()
        backend = SqlBackend(conn, list(TABLES.values()))
        assert isinstance(backend, Backend)
        backend.begin()
        h = Harness(conn, backend, initial, copy_model(initial))
        h.check()
        run_block(h, data, 0)
        commit = data.draw(st.booleans(), label="commit")
        if commit:
            backend.commit()
        else:
            backend.rollback()
        assert no_capture_left(conn)
        if outer:
            assert conn.in_transaction()
            conn.commit()
        assert not conn.in_transaction() or conn.get_transaction() is not None
        assert h.contents() == (h.model if commit else initial)
        if conn.in_transaction():
            conn.rollback()


def no_capture_left(conn: sa.Connection) -> bool:
    """Commit and rollback empty the change log, and the connection logs nothing any more.

    The gated triggers stay installed: on SQLite (guard/sqlite_capture.py) the log is empty and no
    capture tag is on; on PostgreSQL (guard/pg_capture.py) the session's TEMP log is gone and the
    capture setting is off."""
    if conn.dialect.name == "sqlite":
        logged = int(conn.exec_driver_sql(f"SELECT COUNT(*) FROM temp.{LOG}").scalar_one())
        return logged == 0 and not +connection_capture(conn).active
    leftovers = conn.exec_driver_sql(
        f"SELECT relname FROM pg_class WHERE relname = '{LOG}' AND relnamespace = pg_my_temp_schema() "
        f"UNION ALL SELECT tablename FROM pg_tables WHERE tablename = '{LOG}' "
        "AND schemaname = current_schema()"
    ).all()
    setting = conn.exec_driver_sql(f"SELECT current_setting('{CAPTURE_SETTING}', true)").scalar()
    return leftovers == [] and setting != "on"


# -- examples ---------------------------------------------------------------------------------------
def test_closing_a_savepoint_closes_the_ones_opened_after_it(connect: Any) -> None:
    with connect() as conn:
        backend = SqlBackend(conn, [items, stock])
        backend.begin()
        outer = backend.savepoint()
        conn.execute(items.insert().values(id=1, name="a", active=True))
        inner = backend.savepoint()
        conn.execute(items.insert().values(id=2, name="b", active=True))
        backend.rollback_to(outer)
        for name in (outer, inner):
            with pytest.raises(BackendError, match="unknown or closed savepoint"):
                backend.changes(name)
        assert conn.execute(sa.select(sa.func.count()).select_from(items)).scalar_one() == 0
        assert backend.changes() == ChangeSet()
        kept = backend.savepoint()
        conn.execute(items.insert().values(id=3, name="c", active=False))
        backend.savepoint()
        conn.execute(items.insert().values(id=4, name="d", active=False))
        backend.release(kept)
        assert [c.key for c in backend.changes()] == ["3", "4"]
        backend.rollback()


def test_lifecycle_errors_are_clear(connect: Any) -> None:
    with connect() as conn:
        backend = SqlBackend(conn, [items])
        with pytest.raises(BackendError, match=r"call begin\(\) first"):
            backend.savepoint()
        with pytest.raises(BackendError, match=r"call begin\(\) first"):
            backend.changes()
        backend.begin()
        with pytest.raises(BackendError, match="already begun"):
            backend.begin()
        with pytest.raises(BackendError, match="unknown or closed savepoint 'nope'"):
            backend.rollback_to("nope")
        backend.rollback()
        with pytest.raises(BackendError, match=r"call begin\(\) first"):
            backend.commit()


def test_a_table_without_primary_key_needs_a_key_function() -> None:
    table = sa.Table("nokey", sa.MetaData(), sa.Column("v", sa.Integer))
    with sqlite_connection() as conn, pytest.raises(BackendError, match="nokey has no primary key"):
        SqlBackend(conn, [table])
    with sqlite_connection() as conn:
        table.create(conn)
        backend = SqlBackend(conn, [table], keys={"nokey": lambda row: f"v={row['v']}"})
        backend.begin()
        conn.execute(table.insert().values(v=7))
        assert [c.key for c in backend.changes()] == ["v=7"]
        backend.rollback()


def test_hidden_columns_stay_out_of_row_images(connect: Any) -> None:
    with connect() as conn:
        backend = SqlBackend(conn, [items], hidden={"meta", "price"})
        backend.begin()
        conn.execute(items.insert().values(id=1, name="a", price=2.5, active=True, meta={"x": 1}))
        (change,) = backend.changes()
        assert change.after == {"id": 1, "name": "a", "active": True}
        backend.rollback()


def test_float_images_are_exact(connect: Any) -> None:
    """Row images carry the stored double exactly (SQLite's own JSON rendering keeps 15 digits)."""
    values = [0.1 + 0.2, 123456789.12345679, 5e-324, 1.7976931348623157e308, -0.0, 2.0**53 + 2]
    with connect() as conn:
        backend = SqlBackend(conn, [items])
        backend.begin()
        for i, v in enumerate(values):
            conn.execute(items.insert().values(id=i, name="f", price=v, active=False))
        assert [c.after["price"] for c in backend.changes() if c.after] == values
        backend.rollback()


def test_query_is_read_only_and_sees_the_shadow_state(connect: Any) -> None:
    with connect() as conn:
        backend = SqlBackend(conn, [items])
        backend.begin()
        conn.execute(items.insert().values(id=1, name="50% off", price=1.0, active=True))
        found = backend.query("SELECT id, name FROM items WHERE name LIKE '%off' AND id = :id", {"id": 1})
        assert found == [{"id": 1, "name": "50% off"}]
        for bad in ("DELETE FROM items", "SELECT 1; DELETE FROM items", "UPDATE items SET name = 'x'"):
            with pytest.raises(SqlTextError):
                backend.query(bad)
        assert conn.execute(sa.select(sa.func.count()).select_from(items)).scalar_one() == 1
        with pytest.raises(sa.exc.DBAPIError):
            backend.query("SELECT nope FROM items")
        assert backend.query("SELECT count(*) AS n FROM items") == [{"n": 1}]
        assert [c.key for c in backend.changes()] == ["1"]
        backend.rollback()


def test_a_watch_on_sqlite_asks_the_log_only_when_a_row_changed() -> None:
    """After :meth:`SqlBackend.position`, no changed row (SQLite's ``total_changes`` unmoved) answers
    ``changes_after`` without reading the log; a changed row, even of a table the backend does not
    capture, reads it (and a captured one is reported)."""
    with sqlite_connection() as conn:
        conn.exec_driver_sql("CREATE TABLE other (x INTEGER)")
        backend = SqlBackend(conn, list(TABLES.values()))
        backend.begin()
        asked: list[str] = []
        # the log is read on the DBAPI connection, which SQLAlchemy's events do not see
        cast(sqlite3.Connection, conn.connection.dbapi_connection).set_trace_callback(asked.append)
        position = backend.position()
        conn.execute(sa.select(items))
        asked.clear()
        assert not backend.changes_after(position)
        assert not any(LOG in sql for sql in asked)
        conn.exec_driver_sql("INSERT INTO other VALUES (1)")  # a change the capture does not log
        assert not backend.changes_after(position)
        assert any(LOG in sql for sql in asked)
        position = backend.position()
        conn.execute(items.insert().values(id=7, name="n", price=None, active=True, meta=None))
        assert [(c.table, c.op) for c in backend.changes_after(position)] == [("items", "insert")]
        backend.rollback()


def test_a_watch_on_sqlite_takes_the_logs_position_again_only_after_a_row_changed() -> None:
    """:meth:`SqlBackend.position` reads the log only when a row changed since the last position; a
    change rolled back still moves the count, so the position is read again and stays right."""
    with sqlite_connection() as conn:
        backend = SqlBackend(conn, list(TABLES.values()))
        backend.begin()
        asked: list[str] = []
        cast(sqlite3.Connection, conn.connection.dbapi_connection).set_trace_callback(asked.append)
        first = backend.position()
        asked.clear()
        assert backend.position() == first
        assert not any(LOG in sql for sql in asked)
        point = backend.savepoint()
        conn.execute(items.insert().values(id=8, name="n", price=None, active=True, meta=None))
        backend.rollback_to(point)
        asked.clear()
        again = backend.position()
        assert any(LOG in sql for sql in asked)
        conn.execute(items.insert().values(id=9, name="m", price=None, active=True, meta=None))
        assert [(c.table, c.key) for c in backend.changes_after(again)] == [("items", "9")]
        assert backend.position() > again
        backend.rollback()


def test_a_position_taken_again_after_a_rollback_sees_a_change_the_rollback_made_room_for() -> None:
    """A rollback lowers the log without moving SQLite's count of changed rows (its rows were counted
    when they were written): the next position is read from the log, not reused, so a change made
    after it is reported even where the log's ids are taken again."""
    with sqlite_connection() as conn:
        backend = SqlBackend(conn, list(TABLES.values()))
        backend.begin()
        point = backend.savepoint()
        conn.execute(items.insert().values(id=10, name="a", price=None, active=True, meta=None))
        conn.execute(items.insert().values(id=11, name="b", price=None, active=True, meta=None))
        backend.position()  # taken with the two rows in the log
        backend.rollback_to(point)
        position = backend.position()
        conn.execute(items.insert().values(id=12, name="c", price=None, active=True, meta=None))
        assert [(c.table, c.key) for c in backend.changes_after(position)] == [("items", "12")]
        backend.rollback()
