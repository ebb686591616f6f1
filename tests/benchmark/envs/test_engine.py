"""The environment engine on SQLite and PostgreSQL: init state, patch semantics, isolation, bad input."""

from __future__ import annotations

import pytest

from benchmark.envs import (
    Database,
    DataError,
    Domain,
    Environment,
    UnknownDomainError,
    UnknownTableError,
    load_domain,
)
from benchmark.envs.schema import build_table
from benchmark.tasks import BenchData, Task

TICKETS = "zendesk_tickets"
ORDERS = "external_retail_toolset_oms_models_orders"


def test_every_retail_init_state_hashes_like_the_reference(
    retail: Domain, retail_tasks: list[Task], database: Database
) -> None:
    mismatched = []
    for task in retail_tasks:
        with Environment(retail, database) as env:
            env.apply_patch(task.data_patch)
            assert task.answer.expected is not None
            if env.state_hash() != task.answer.expected.init_db_hash:
                mismatched.append(task.id)
    assert mismatched == []


def test_patch_upserts_in_place_and_empty_lists_keep_defaults(retail: Domain, database: Database) -> None:
    with Environment(retail, database) as env:
        default_ids = [r["id"] for r in env.state.rows(TICKETS)]
        first = env.state.rows(TICKETS)[0]
        env.apply_patch({TICKETS: [], ORDERS: []})
        assert [r["id"] for r in env.state.rows(TICKETS)] == default_ids
        env.apply_patch({TICKETS: [{**first, "status": "solved"}, {**first, "id": "new-1"}]})
        rows = env.state.rows(TICKETS)
        assert [r["id"] for r in rows] == [*default_ids, "new-1"]  # replaced in place, new row appended
        assert rows[0]["status"] == "solved"


def test_patch_validation_coerces_like_pydantic(retail: Domain, sqlite_db: Database) -> None:
    order = {
        "id": "ORD-X",
        "customer_id": "C",
        "order_date": "2025-09-13T10:30:00+00:00",
        "subtotal_amount": 435,
        "total_amount": "435",
        "shipping_address_line1": "a",
        "shipping_address_city": "b",
        "shipping_address_state": "c",
        "shipping_address_zip": "d",
    }
    with Environment(retail, sqlite_db) as env:
        ticket = {**env.state.rows(TICKETS)[0], "id": "T-X", "solved_at": "2025-10-01T00:00:00Z"}
        env.apply_patch({ORDERS: [order], TICKETS: [ticket]})
        stored_ticket = env.state.by_key(TICKETS, "T-X")
        # unknown fields dropped (extra=ignore)
        assert stored_ticket is not None and "solved_at" not in stored_ticket
        with pytest.raises(DataError, match="Extra inputs are not permitted"):  # extra=forbid models refuse
            env.apply_patch({ORDERS: [{**order, "unknown_field": 1}]})
        stored = env.table(ORDERS).get("ORD-X")
        row = env.state.by_key(ORDERS, "ORD-X")
    assert stored is not None and row is not None
    assert row["order_date"] == "2025-09-13T10:30:00Z"
    assert row["subtotal_amount"] == 435.0 and row["total_amount"] == 435.0
    assert row["status"] == "pending_payment"  # model default filled


@pytest.mark.parametrize(
    ("patch", "error", "message"),
    [
        ({"no_such_table": []}, UnknownTableError, "Unknown table: no_such_table"),
        ({TICKETS: {"id": "1"}}, DataError, "must be a list"),
        ({TICKETS: ["not a row"]}, DataError, r"zendesk_tickets\[0\]: must be an object"),
        ({TICKETS: [{"id": "99", "status": "open"}]}, DataError, r"zendesk_tickets\[0\]"),
        (
            {
                "zendesk_users": [
                    {"id": "99", "name": "n", "email": "e", "created_at": "x", "updated_at": "y"}
                ],
                ORDERS: [{"id": "O", "subtotal_amount": "lots"}],
            },
            DataError,
            "orders",
        ),
        (["x"], DataError, "must be a mapping"),
    ],
)
def test_bad_patch_is_refused_and_changes_nothing(
    retail: Domain, database: Database, patch: object, error: type[Exception], message: str
) -> None:
    with Environment(retail, database) as env:
        before = env.state_hash()
        with pytest.raises(error, match=message):
            env.apply_patch(patch)  # type: ignore[arg-type]
        assert env.state_hash() == before


def test_attempts_are_isolated(retail: Domain, database: Database) -> None:
    with Environment(retail, database) as a, Environment(retail, database) as b:
        pristine = b.state_hash()
        a.table(TICKETS).delete(a.state.rows(TICKETS)[0]["id"])
        assert a.state_hash() != pristine
        assert b.state_hash() == pristine
    with Environment(retail, database) as c:
        assert c.state_hash() == pristine


def test_savepoint_rollback_restores_state(retail: Domain, database: Database) -> None:
    with Environment(retail, database) as env:
        before = env.state_hash()
        savepoint = env.connection.begin_nested()
        env.table(TICKETS).delete(env.state.rows(TICKETS)[0]["id"])
        savepoint.rollback()
        assert env.state_hash() == before


def test_unknown_tool_answers_like_the_reference(retail: Domain, sqlite_db: Database) -> None:
    with Environment(retail, sqlite_db) as env:
        before = env.state_hash()
        assert env.call_tool("nonexistent", {}) == "Unknown tool: nonexistent"
        assert env.state_hash() == before


def test_unknown_domain(bench: BenchData) -> None:
    with pytest.raises(UnknownDomainError, match="unknown domain 'nope'"):
        load_domain("nope", bench.bundle)


def test_unknown_database_url() -> None:
    with pytest.raises(ValueError, match="unsupported database"):
        Database("mysql://localhost/x")


def test_composite_key_from_models_json_source() -> None:
    spec = build_table(
        "pools",
        {
            "model": "Pool",
            "module": "m.models",
            "extra": "forbid",
            "unstable_extra": False,
            "has_id_field": False,
            "default_rows": 0,
            "id_field": 'return f"{self.catalog_id}_{self.pool_type.value}"',
            "fields": {
                "catalog_id": {
                    "type": "str",
                    "required": True,
                    "default": None,
                    "unstable": False,
                    "enum": None,
                },
                "pool_type": {
                    "type": "PoolType",
                    "required": True,
                    "default": None,
                    "unstable": False,
                    "enum": ["named", "shared"],
                },
            },
        },
    )
    row = spec.validate_row({"catalog_id": "CAT-1", "pool_type": "shared"})
    assert spec.key(row) == "CAT-1_shared"
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        spec.validate_row({"catalog_id": "CAT-1", "pool_type": "shared", "x": 1})
