"""Retail payment tools (charge_customer, create_refund, get_payment_status) on a real Environment."""

from __future__ import annotations

from typing import Any

from benchmark.envs import Environment
from benchmark.tasks import Task
from tests.support.envs import call, records, stored

TXNS = "external_retail_toolset_stripe_models_payment_transactions"
REFUNDS = "external_retail_toolset_stripe_models_refunds"


def _golden_call(tasks: list[Task], tool: str) -> tuple[Task, dict[str, Any]]:
    """The first task whose golden trajectory calls ``tool`` first, with that call's parameters."""
    for task in tasks:
        calls = task.answer.golden_tool_interactions
        if calls and calls[0].tool == tool:
            return task, dict(calls[0].parameters)
    for task in tasks:
        for step in task.answer.golden_tool_interactions:
            if step.tool == tool:
                return task, dict(step.parameters)
    raise LookupError(tool)


def test_charge_customer_appends_authorized_card_charge(env: Environment) -> None:
    before = env.table(TXNS).count()
    out = call(
        env,
        "charge_customer",
        {"order_id": "ORD-X", "customer_id": "CUS-X", "amount": 15, "charge_reason": "reship_fee"},
    )
    txn_id = f"TXN-2{before:07d}"
    assert out == {
        "transaction_id": txn_id,
        "order_id": "ORD-X",
        "amount": 15.0,
        "status": "authorized",
        "transaction_date": "2025-10-01T13:00:05+00:00",
    }
    row = stored(env, TXNS, txn_id)
    assert row["payment_method"] == "Card on file"
    assert row["customer_id"] == "CUS-X"
    assert row["charge_reason"] == "reship_fee"
    assert row["transaction_date"] == "2025-10-01T13:00:05Z"


def test_charge_customer_rejects_unknown_reason_without_writing(env: Environment) -> None:
    before = env.table(TXNS).count()
    out = call(
        env, "charge_customer", {"order_id": "O", "customer_id": "C", "amount": 1, "charge_reason": "tip"}
    )
    assert out["tool"] == "charge_customer"
    assert out["error"].startswith(
        "Tool execution failed: Input validation failed: charge_reason: Input should be"
    )
    assert env.table(TXNS).count() == before


def test_charge_customer_refuses_an_id_collision(env: Environment) -> None:
    taken = f"TXN-2{env.table(TXNS).count() + 1:07d}"
    env.apply_patch({TXNS: [{**env.table(TXNS).all()[0].model_dump(mode="json"), "id": taken}]})
    out = call(
        env,
        "charge_customer",
        {"order_id": "O", "customer_id": "C", "amount": 1, "charge_reason": "reship_fee"},
    )
    assert out["error"] == f"Tool execution failed: Object with ID {taken} already exists"


def test_create_refund_from_golden_call(retail_tasks: list[Task], env: Environment) -> None:
    task, params = _golden_call(retail_tasks, "create_refund")
    env.apply_patch(task.data_patch)
    original = env.table(TXNS).where(order_id=params["order_id"])[-1].model_dump()
    refunds_before = env.table(REFUNDS).count()
    out = call(env, "create_refund", params)
    refund_id = f"RFD-2{refunds_before:07d}"
    assert out == {
        "refund_id": refund_id,
        "transaction_id": original["id"],
        "amount": float(params["amount"]),
        "status": "pending",
        "refund_date": "2025-10-01T13:00:05+00:00",
    }
    row = stored(env, REFUNDS, refund_id)
    assert row["order_id"] == params["order_id"]
    assert row["refund_reason"] == params["refund_reason"]
    assert row["refund_date"] == "2025-10-01T13:00:05Z"


def test_create_refund_uses_the_orders_last_transaction(env: Environment) -> None:
    order_id = records(env, TXNS)[0]["order_id"]
    charge = call(
        env,
        "charge_customer",
        {"order_id": order_id, "customer_id": "C", "amount": 10, "charge_reason": "shipping_upgrade"},
    )
    out = call(
        env,
        "create_refund",
        {"order_id": order_id, "customer_id": "C", "amount": 99999, "refund_reason": "order_cancelled"},
    )
    assert out["transaction_id"] == charge["transaction_id"]
    assert out["amount"] == 99999.0


def test_create_refund_needs_a_transaction(env: Environment) -> None:
    before = env.table(REFUNDS).count()
    out = call(
        env,
        "create_refund",
        {"order_id": "NOPE", "customer_id": "C", "amount": 1, "refund_reason": "rma_processed"},
    )
    assert out == {
        "error": "Tool execution failed: Original payment transaction not found for order: NOPE",
        "tool": "create_refund",
    }
    assert env.table(REFUNDS).count() == before


def test_get_payment_status_returns_the_transaction(env: Environment) -> None:
    txn = records(env, TXNS)[0]
    out = call(env, "get_payment_status", {"order_id": txn["order_id"]})
    assert list(out) == [
        "transaction_id",
        "order_id",
        "customer_id",
        "amount",
        "status",
        "payment_method",
        "transaction_date",
    ]
    assert out["transaction_id"] == txn["id"]
    assert out["amount"] == txn["amount"]
    assert out["status"] == txn["status"].value
    assert out["transaction_date"] == txn["transaction_date"].isoformat()


def test_get_payment_status_unknown_order(env: Environment) -> None:
    out = call(env, "get_payment_status", {"order_id": "ORD-NONE"})
    assert out["error"] == "Tool execution failed: No payment transaction found for order: ORD-NONE"
    extra = call(env, "get_payment_status", {"order_id": "ORD-NONE", "x": 1})
    assert (
        extra["error"] == "Tool execution failed: Input validation failed: x: Extra inputs are not permitted"
    )
