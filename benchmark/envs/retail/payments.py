"""Payments (stripe) tools."""

from __future__ import annotations

import datetime as dt
from typing import Any

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.retail.inputs import ChargeCustomerInput, CreateRefundInput, GetPaymentStatusInput
from benchmark.envs.retail.rows import PaymentTransaction, Refund
from benchmark.envs.tools import ToolFn

TRANSACTIONS: TableRef[PaymentTransaction] = TableRef(
    "external_retail_toolset_stripe_models_payment_transactions"
)
REFUNDS: TableRef[Refund] = TableRef("external_retail_toolset_stripe_models_refunds")

# Every retail write tool stamps this fixed instant (docs/benchmark.md#frozen-clocks).
WRITE_NOW = dt.datetime(2025, 10, 1, 13, 0, 5, tzinfo=dt.UTC)


def charge_customer(env: Environment, args: ChargeCustomerInput) -> dict[str, Any]:
    """Append an authorized card-on-file charge; the reference checks neither order nor amount."""
    table = env.table(TRANSACTIONS)
    txn = table.create(
        table.record(
            {
                "id": f"TXN-2{table.count():07d}",
                "order_id": args.order_id,
                "customer_id": args.customer_id,
                "amount": args.amount,
                "status": "authorized",
                "payment_method": "Card on file",
                "transaction_date": WRITE_NOW,
                "charge_reason": args.charge_reason.value,
            }
        )
    )
    return {
        "transaction_id": txn.id,
        "order_id": txn.order_id,
        "amount": txn.amount,
        "status": txn.status.value,
        "transaction_date": txn.transaction_date.isoformat(),
    }


def create_refund(env: Environment, args: CreateRefundInput) -> dict[str, Any]:
    """Append a pending refund against the order's last transaction; amounts are not checked."""
    matches = env.table(TRANSACTIONS).where(order_id=args.order_id)
    if not matches:
        raise ToolError(f"Original payment transaction not found for order: {args.order_id}")
    table = env.table(REFUNDS)
    refund = table.create(
        table.record(
            {
                "id": f"RFD-2{table.count():07d}",
                "transaction_id": matches[-1].id,
                "order_id": args.order_id,
                "amount": args.amount,
                "refund_reason": args.refund_reason.value,
                "status": "pending",
                "refund_date": WRITE_NOW,
            }
        )
    )
    return {
        "refund_id": refund.id,
        "transaction_id": refund.transaction_id,
        "amount": refund.amount,
        "status": refund.status,
        "refund_date": refund.refund_date.isoformat(),
    }


def get_payment_status(env: Environment, args: GetPaymentStatusInput) -> dict[str, Any]:
    """The order's payment transaction (the first one stored for it)."""
    matches = env.table(TRANSACTIONS).where(order_id=args.order_id)
    if not matches:
        raise ToolError(f"No payment transaction found for order: {args.order_id}")
    txn = matches[0]
    return {
        "transaction_id": txn.id,
        "order_id": txn.order_id,
        "customer_id": txn.customer_id,
        "amount": txn.amount,
        "status": txn.status.value,
        "payment_method": txn.payment_method,
        "transaction_date": txn.transaction_date.isoformat(),
    }


TOOLS: dict[str, ToolFn] = {
    "charge_customer": charge_customer,
    "create_refund": create_refund,
    "get_payment_status": get_payment_status,
}

READ_ONLY: frozenset[str] = frozenset({"get_payment_status"})
