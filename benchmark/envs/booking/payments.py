"""Payment API tools: transactions (charges, refunds, disputes), invoices and payment methods.

Transactions keep ``created_at``/``updated_at`` as plain strings, so the frozen instants below are stored
in their ``isoformat()`` form (``+00:00``) and the "most recent" orderings compare those strings.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from benchmark.envs.booking.common import ESCALATE_TIME, MODIFY_TIME, cents, finite, parse_iso
from benchmark.envs.booking.inputs import (
    PaymentApiCheckPaymentStatusInput,
    PaymentApiGenerateInvoiceInput,
    PaymentApiGetTransactionHistoryInput,
    PaymentApiProcessChargeDisputeInput,
    PaymentApiProcessChargeInput,
    PaymentApiProcessRefundInput,
    PaymentApiUpdatePaymentMethodInput,
)
from benchmark.envs.booking.rows import Booking, Transaction
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

BOOKINGS: TableRef[Booking] = TableRef("booking_api_bookings")
TRANSACTIONS: TableRef[Transaction] = TableRef("payment_api_transactions")

# Frozen "now" of charge, refund and invoice (docs/benchmark.md#frozen-clocks), and of disputes.
PAYMENT_NOW = parse_iso(MODIFY_TIME)
DISPUTE_NOW = parse_iso(ESCALATE_TIME)

REFUND_ESTIMATE = "3-5 business days"


def _booking(env: Environment, booking_reference: str) -> Booking:
    """The first booking with this reference (not the row id, which often differs)."""
    found = env.table(BOOKINGS).where(booking_reference=booking_reference)
    if not found:
        raise ToolError(f"Booking not found: {booking_reference}")
    return found[0]


def _append_transaction(
    env: Environment,
    source: Booking | Transaction,
    *,
    txn_id: str,
    amount: Decimal,
    kind: str,
    status: str,
    reason: str,
    now: dt.datetime,
    estimate: str | None = None,
) -> None:
    """Store a transaction row for the booking/customer of ``source`` (a booking or a transaction)."""
    table = env.table(TRANSACTIONS)
    table.create(
        table.record(
            {
                "id": txn_id,
                "transaction_id": txn_id,
                "booking_reference": source.booking_reference,
                "customer_id": source.customer_id,
                "amount": amount,
                "currency": "USD",
                "transaction_type": kind,
                "payment_status": status,
                "payment_method": None,
                "reason": reason,
                "processing_time_estimate": estimate,
                "created_at": now.isoformat(),
                "updated_at": now.isoformat(),
            }
        )
    )


def payment_api_check_payment_status(
    env: Environment, args: PaymentApiCheckPaymentStatusInput
) -> dict[str, Any]:
    """Status of the booking's latest transaction by created_at text; the first one wins a tie."""
    found = env.table(TRANSACTIONS).where(booking_reference=args.booking_reference)
    if not found:
        raise ToolError(f"No transactions found for booking: {args.booking_reference}")
    latest = max(found, key=lambda t: t.created_at)
    return {
        "payment_status": latest.payment_status.value,
        "transaction_id": latest.transaction_id,
        "payment_method": latest.payment_method,
    }


def payment_api_generate_invoice(env: Environment, args: PaymentApiGenerateInvoiceInput) -> dict[str, Any]:
    """A document URL stamped with the frozen instant; nothing is stored and invoice_type is unused."""
    _booking(env, args.booking_reference)
    stamp = PAYMENT_NOW.strftime("%Y%m%d%H%M%S")
    return {
        "invoice_url": f"https://staybridge.com/invoices/{args.booking_reference}-{stamp}.pdf",
        "invoice_id": f"INV-{args.booking_reference}-{stamp}",
    }


def payment_api_get_transaction_history(
    env: Environment, args: PaymentApiGetTransactionHistoryInput
) -> dict[str, Any]:
    """Transactions matching every given (non-empty) filter, newest created_at text first, stable."""
    if not args.customer_id and not args.booking_reference:
        raise ToolError("Either customer_id or booking_reference must be provided")
    rows = env.table(TRANSACTIONS).all()
    if args.customer_id:
        rows = [t for t in rows if t.customer_id == args.customer_id]
    if args.booking_reference:
        rows = [t for t in rows if t.booking_reference == args.booking_reference]
    rows.sort(key=lambda t: t.created_at, reverse=True)
    return {"transactions": [t.model_dump(mode="json", exclude_none=True) for t in rows]}


def payment_api_process_charge(env: Environment, args: PaymentApiProcessChargeInput) -> dict[str, Any]:
    """Append a successful charge TXN-{len+1:08d} for an existing booking; the amount must be positive."""
    finite("charge_amount", args.charge_amount)
    booking = _booking(env, args.booking_reference)
    if Decimal(str(args.charge_amount)) <= 0:
        raise ToolError("Invalid charge amount - must be greater than 0")
    txn_id = f"TXN-{env.table(TRANSACTIONS).count() + 1:08d}"
    _append_transaction(
        env,
        booking,
        txn_id=txn_id,
        amount=cents(args.charge_amount),
        kind="charge",
        status="successful",
        reason=args.reason,
        now=PAYMENT_NOW,
    )
    return {"transaction_id": txn_id, "payment_status": "successful"}


def payment_api_process_charge_dispute(
    env: Environment, args: PaymentApiProcessChargeDisputeInput
) -> dict[str, Any]:
    """Append a pending dispute DSP-{#disputes+1:08d} against an existing transaction; amount unchecked."""
    finite("dispute_amount", args.dispute_amount)
    table = env.table(TRANSACTIONS)
    rows = table.all()
    original = next((t for t in rows if t.transaction_id == args.transaction_id), None)
    if original is None:
        raise ToolError(f"Transaction not found: {args.transaction_id}")
    disputes = len(table.where(transaction_type="dispute"))
    case_id = f"DSP-{disputes + 1:08d}"
    _append_transaction(
        env,
        original,
        txn_id=case_id,
        amount=cents(args.dispute_amount),
        kind="dispute",
        status="pending",
        reason=args.dispute_reason,
        now=DISPUTE_NOW,
    )
    return {"dispute_case_id": case_id, "dispute_status": "under_review"}


def payment_api_process_refund(env: Environment, args: PaymentApiProcessRefundInput) -> dict[str, Any]:
    """Append a successful refund TXN-{len+1:08d} for an existing booking; the amount is never checked."""
    finite("refund_amount", args.refund_amount)
    booking = _booking(env, args.booking_reference)
    txn_id = f"TXN-{env.table(TRANSACTIONS).count() + 1:08d}"
    _append_transaction(
        env,
        booking,
        txn_id=txn_id,
        amount=cents(args.refund_amount),
        kind="refund",
        status="successful",
        reason=args.reason,
        now=PAYMENT_NOW,
        estimate=REFUND_ESTIMATE,
    )
    return {
        "transaction_id": txn_id,
        "refund_status": "successful",
        "processing_time_estimate": REFUND_ESTIMATE,
    }


def payment_api_update_payment_method(
    env: Environment, args: PaymentApiUpdatePaymentMethodInput
) -> dict[str, Any]:
    """Only checks that the customer has a booking and echoes the token's last 4; nothing is stored."""
    if not env.table(BOOKINGS).where(customer_id=args.customer_id):
        raise ToolError(f"Customer not found: {args.customer_id}")
    token = args.new_payment_method
    return {"success": True, "payment_method_last4": token[-4:] if len(token) >= 4 else "****"}


TOOLS: dict[str, ToolFn] = {
    "payment_api_check_payment_status": payment_api_check_payment_status,
    "payment_api_generate_invoice": payment_api_generate_invoice,
    "payment_api_get_transaction_history": payment_api_get_transaction_history,
    "payment_api_process_charge": payment_api_process_charge,
    "payment_api_process_charge_dispute": payment_api_process_charge_dispute,
    "payment_api_process_refund": payment_api_process_refund,
    "payment_api_update_payment_method": payment_api_update_payment_method,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "payment_api_check_payment_status",
        "payment_api_generate_invoice",
        "payment_api_get_transaction_history",
        "payment_api_update_payment_method",
    }
)
