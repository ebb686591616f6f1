"""A small purpose-built world for the guard core's unit tests: a shop with customers and orders in
SQLite (one in-memory connection), a handful of tools over it, and a pack written for it.

Nothing here reads the benchmark data bundle, so tests on it run wherever the package installs.

Also a bare ``notes`` table (id, body) for tests of the guard's database handling, and the databases
those tests run on: :func:`sqlite_memory` and :func:`postgresql_schema`.

Tools: ``get_order`` (read), ``cancel_order`` (write: status to ``cancelled``; an error result for an
unknown order), ``set_total`` (write: the order's total), ``add_order`` (write: a new order row).
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from guard.effects import ToolInfo
from guard.session import ToolResult
from guard.sql_backend import SqlBackend


def keyed_table(
    name: str,
    metadata: sa.MetaData,
    *columns: sa.Column[Any],
    key: type[sa.types.TypeEngine[Any]] = sa.Integer,
) -> sa.Table:
    """A table ``name`` in ``metadata`` whose primary key is an ``id`` of type ``key`` that the test
    chooses (never autoincremented), followed by ``columns``."""
    return sa.Table(name, metadata, sa.Column("id", key, primary_key=True, autoincrement=False), *columns)


@contextmanager
def sqlite_memory(metadata: sa.MetaData) -> Iterator[sa.Connection]:
    """The plain pysqlite engine a user would create: one in-memory database with ``metadata``'s tables."""
    engine = sa.create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.connect() as conn:
            metadata.create_all(conn)
            conn.commit()
            yield conn
    finally:
        engine.dispose()


@contextmanager
def postgresql_schema(
    engine: sa.Engine, create: Callable[[sa.Connection], None], prefix: str = "sg_test"
) -> Iterator[sa.Connection]:
    """A connection whose ``search_path`` is a throwaway schema that ``create`` fills (its tables and rows,
    committed); the schema is dropped afterwards, whatever the test left open."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        conn.exec_driver_sql(f'SET search_path TO "{schema}"')
        create(conn)
        conn.commit()
        try:
            yield conn
        finally:
            if conn.in_transaction():
                conn.rollback()
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            conn.commit()


def text_column(name: str) -> sa.Column[str]:
    """A required (NOT NULL) text column."""
    return sa.Column(name, sa.Text, nullable=False)


metadata = sa.MetaData()
customers = keyed_table("customers", metadata, text_column("name"), key=sa.Text)
orders = keyed_table(
    "orders",
    metadata,
    sa.Column("customer_id", sa.Text, sa.ForeignKey("customers.id"), nullable=False),
    text_column("status"),
    sa.Column("total", sa.Float, nullable=False),
    key=sa.Text,
)
SCHEMA = {t.name: [c.name for c in t.columns] for t in metadata.sorted_tables}
notes_metadata = sa.MetaData()
notes = keyed_table("notes", notes_metadata, text_column("body"), key=sa.Text)
"""A notes table of its own (``notes_metadata``) for the guard's lock and capture tests, which need a
real database file or PostgreSQL rather than the shop's in-memory one."""
CUSTOMERS = [{"id": "C1", "name": "Ada"}, {"id": "C2", "name": "Brook"}]
ORDERS = [
    {"id": "O1", "customer_id": "C1", "status": "processing", "total": 40.0},
    {"id": "O2", "customer_id": "C1", "status": "shipped", "total": 120.0},
    {"id": "O3", "customer_id": "C2", "status": "processing", "total": 300.0},
]
ARGUMENTS: dict[str, dict[str, Any]] = {
    "get_order": {"order_id": {"type": "string"}},
    "cancel_order": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
    "set_total": {"order_id": {"type": "string"}, "total": {"type": "number"}},
    "add_order": {
        "order_id": {"type": "string"},
        "customer_id": {"type": "string"},
        "total": {"type": "number"},
    },
}
TOOLS: dict[str, ToolInfo] = {
    name: ToolInfo(
        name=name,
        input_schema={"type": "object", "properties": props, "required": ["order_id"]},
        annotations={"readOnlyHint": name == "get_order"},
    )
    for name, props in ARGUMENTS.items()
}


@dataclass
class Shop:
    """The shop's connection and backend, and the executor the guard forwards calls to (it records
    the calls that reach it)."""

    connection: sa.Connection
    backend: SqlBackend
    calls: list[str] = field(default_factory=list)

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(tool)
        order_id = arguments.get("order_id")
        if tool == "add_order":
            row = {"id": order_id, "customer_id": arguments["customer_id"], "status": "processing"}
            self.connection.execute(orders.insert().values(**row, total=arguments["total"]))
            return ToolResult(json.dumps({"created": order_id}))
        found = self.order(str(order_id))
        if found is None:
            return ToolResult(json.dumps({"error": f"no order {order_id}"}), is_error=True)
        if tool == "cancel_order":
            self._update(str(order_id), status="cancelled")
        elif tool == "set_total":
            self._update(str(order_id), total=arguments["total"])
        return ToolResult(json.dumps(self.order(str(order_id))))

    def _update(self, order_id: str, **values: Any) -> None:
        self.connection.execute(orders.update().where(orders.c.id == order_id).values(**values))

    def order(self, order_id: str) -> dict[str, Any] | None:
        row = self.connection.execute(sa.select(orders).where(orders.c.id == order_id)).mappings().first()
        return dict(row) if row is not None else None

    def rows(self) -> list[dict[str, Any]]:
        """Every order as stored (what a committed or rolled-back session left)."""
        result = self.connection.execute(sa.select(orders).order_by(orders.c.id)).mappings()
        return [dict(r) for r in result]


@contextmanager
def open_shop() -> Iterator[Shop]:
    """A fresh seeded shop on its own in-memory SQLite database."""
    engine = sa.create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.connect() as connection:
            metadata.create_all(connection)
            connection.execute(customers.insert(), CUSTOMERS)
            connection.execute(orders.insert(), ORDERS)
            connection.commit()
            yield Shop(connection, SqlBackend(connection, list(metadata.sorted_tables)))
    finally:
        engine.dispose()


def write_pack(folder: Path, text: str) -> Path:
    """Writes a pack's ``policy.yaml`` (dedented) into ``folder`` and returns its path."""
    path = folder / "policy.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


SHOP_PACK = """
    version: 1
    name: shop
    domain: shop
    description: the guard core's test pack
    tools:
      effects: {get_order: read, cancel_order: irreversible, set_total: write, add_order: write}
    checks:
      - id: shop.cancel_processing_only
        phase: before_call
        tools: [cancel_order]
        source: {ref: "Shop policy 1"}
        message: Only processing orders can be cancelled.
        sql: SELECT o.id, o.status FROM orders AS o WHERE o.id = :order_id AND o.status <> 'processing'
      - id: shop.total_not_negative
        phase: after_call
        tools: [set_total]
        source: {ref: "Shop policy 2"}
        message: An order's total is never negative.
        sql: SELECT o.id FROM orders AS o WHERE o.total < 0
      - id: shop.at_most_two_open_orders
        phase: at_commit
        source: {ref: "Shop policy 3"}
        message: A customer has at most two processing orders.
        sql: >-
          SELECT o.customer_id FROM orders AS o WHERE o.status = 'processing'
          GROUP BY o.customer_id HAVING COUNT(*) > 2
"""
