"""Payment API tools on a real Environment (SQLite in memory).

A small patch over the domain defaults: booking BKG-P1 of customer CUS-P1 whose row id differs from
its reference, and two transactions on it (an older successful charge and a newer failed one).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from benchmark.envs import Environment
from benchmark.envs.booking import payments
from tests.support.envs import Patch, call, failure, record, stored

TXNS = "payment_api_transactions"


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def _txn(txn_id: str, status: str, created: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": txn_id,
        "transaction_id": txn_id,
        "booking_reference": "BKG-P1",
        "customer_id": "CUS-P1",
        "amount": "200.00",
        "transaction_type": "charge",
        "payment_status": status,
        "created_at": created,
        "updated_at": created,
        **extra,
    }


PATCH = {
    "booking_api_bookings": [
        {
            "id": "BKG-ROW-1",
            "booking_reference": "BKG-P1",
            "customer_id": "CUS-P1",
            "hotel_id": "HTL-00012345",
            "check_in_date": "2025-12-01T15:00:00Z",
            "check_out_date": "2025-12-03T11:00:00Z",
            "booking_value": "400.00",
            "room_type": "deluxe_room",
            "board_type": "with_breakfast",
            "adults_count": 2,
            "created_at": "2025-09-01T10:00:00Z",
            "updated_at": "2025-09-01T10:00:00Z",
        }
    ],
    TXNS: [
        _txn("TXN-P-OLD", "successful", "2025-09-01T10:00:00Z", payment_method="Visa ending in 4242"),
        _txn("TXN-P-NEW", "failed", "2025-09-02T10:00:00Z"),
    ],
}


def test_check_payment_status_reports_latest_transaction(env: Environment) -> None:
    out = call(env, "payment_api_check_payment_status", {"booking_reference": "BKG-P1"})
    assert out == {"payment_status": "failed", "transaction_id": "TXN-P-NEW"}


def test_check_payment_status_without_transactions(env: Environment) -> None:
    tool = "payment_api_check_payment_status"
    out = call(env, tool, {"booking_reference": "BKG-NONE"})
    assert out == failure(tool, "No transactions found for booking: BKG-NONE")


def test_generate_invoice_builds_frozen_url(env: Environment) -> None:
    out = call(
        env, "payment_api_generate_invoice", {"booking_reference": "BKG-P1", "invoice_type": "receipt"}
    )
    assert out == {
        "invoice_url": "https://staybridge.com/invoices/BKG-P1-20251125100000.pdf",
        "invoice_id": "INV-BKG-P1-20251125100000",
    }


def test_generate_invoice_matches_reference_not_row_id(env: Environment) -> None:
    tool = "payment_api_generate_invoice"
    out = call(env, tool, {"booking_reference": "BKG-ROW-1", "invoice_type": "receipt"})
    assert out == failure(tool, "Booking not found: BKG-ROW-1")


def test_transaction_history_newest_first_without_nulls(env: Environment) -> None:
    out = call(env, "payment_api_get_transaction_history", {"customer_id": "CUS-P1"})
    assert [t["id"] for t in out["transactions"]] == ["TXN-P-NEW", "TXN-P-OLD"]
    newest = out["transactions"][0]
    assert newest["amount"] == "200.00"
    assert newest["currency"] == "USD"
    assert "payment_method" not in newest
    assert out["transactions"][1]["payment_method"] == "Visa ending in 4242"
    both = call(
        env, "payment_api_get_transaction_history", {"customer_id": "CUS-P1", "booking_reference": "BKG-X"}
    )
    assert both == {"transactions": []}


def test_transaction_history_needs_a_filter(env: Environment) -> None:
    tool = "payment_api_get_transaction_history"
    out = call(env, tool, {"customer_id": ""})
    assert out == failure(tool, "Either customer_id or booking_reference must be provided")


def test_process_charge_appends_rounded_charge(env: Environment) -> None:
    count = env.table(TXNS).count()
    out = call(
        env,
        "payment_api_process_charge",
        {"booking_reference": "BKG-P1", "charge_amount": "12.345", "reason": "late_fee"},
    )
    txn_id = f"TXN-{count + 1:08d}"
    assert out == {"transaction_id": txn_id, "payment_status": "successful"}
    row = stored(env, TXNS, txn_id)
    assert row["amount"] == "12.35"
    assert row["customer_id"] == "CUS-P1"
    assert row["transaction_type"] == "charge"
    assert row["reason"] == "late_fee"
    assert row["created_at"] == "2025-11-25T10:00:00+00:00"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"booking_reference": "BKG-P1", "charge_amount": 0, "reason": "x"},
            "Invalid charge amount - must be greater than 0",
        ),
        ({"booking_reference": "BKG-NO", "charge_amount": 5, "reason": "x"}, "Booking not found: BKG-NO"),
        (
            {"booking_reference": "BKG-P1", "charge_amount": "inf", "reason": "x"},
            "Input validation failed: charge_amount: Input should be a finite number",
        ),
    ],
)
def test_process_charge_refusals_write_nothing(env: Environment, args: dict[str, Any], message: str) -> None:
    count = env.table(TXNS).count()
    assert call(env, "payment_api_process_charge", args) == failure("payment_api_process_charge", message)
    assert env.table(TXNS).count() == count


def test_process_charge_tiny_positive_amount_rounds_to_zero(env: Environment) -> None:
    out = call(
        env,
        "payment_api_process_charge",
        {"booking_reference": "BKG-P1", "charge_amount": 0.001, "reason": "x"},
    )
    assert record(env, TXNS, out["transaction_id"])["amount"] == Decimal("0.00")


def test_process_refund_accepts_any_amount(env: Environment) -> None:
    count = env.table(TXNS).count()
    out = call(
        env,
        "payment_api_process_refund",
        {"booking_reference": "BKG-P1", "refund_amount": -5, "reason": "goodwill"},
    )
    txn_id = f"TXN-{count + 1:08d}"
    assert out == {
        "transaction_id": txn_id,
        "refund_status": "successful",
        "processing_time_estimate": "3-5 business days",
    }
    row = record(env, TXNS, txn_id)
    assert row["amount"] == Decimal("-5.00")
    assert row["transaction_type"].value == "refund"
    assert row["processing_time_estimate"] == "3-5 business days"


def test_process_refund_unknown_booking(env: Environment) -> None:
    tool = "payment_api_process_refund"
    out = call(env, tool, {"booking_reference": "BKG-NO", "refund_amount": 5, "reason": "x"})
    assert out == failure(tool, "Booking not found: BKG-NO")


def test_process_charge_dispute_numbers_disputes(env: Environment) -> None:
    tool = "payment_api_process_charge_dispute"
    args = {"transaction_id": "TXN-P-OLD", "dispute_reason": "unauthorized_charge", "dispute_amount": 50}
    assert call(env, tool, args) == {"dispute_case_id": "DSP-00000001", "dispute_status": "under_review"}
    assert call(env, tool, args)["dispute_case_id"] == "DSP-00000002"
    row = record(env, TXNS, "DSP-00000001")
    assert row["booking_reference"] == "BKG-P1"
    assert row["payment_status"].value == "pending"
    assert row["amount"] == Decimal("50.00")
    assert row["created_at"] == "2025-11-30T10:00:00+00:00"


def test_process_charge_dispute_rejects_unknown_transaction_and_extras(env: Environment) -> None:
    tool = "payment_api_process_charge_dispute"
    args = {"transaction_id": "TXN-NO", "dispute_reason": "r", "dispute_amount": 1}
    assert call(env, tool, args) == failure(tool, "Transaction not found: TXN-NO")
    out = call(env, tool, {**args, "transaction_id": "TXN-P-OLD", "extra": 1})
    assert out == failure(tool, "Input validation failed: extra: Extra inputs are not permitted")


def test_update_payment_method_stores_nothing(env: Environment) -> None:
    before = env.state_hash()
    tool = "payment_api_update_payment_method"
    assert call(env, tool, {"customer_id": "CUS-P1", "new_payment_method": "tok_9876"}) == {
        "success": True,
        "payment_method_last4": "9876",
    }
    assert (
        call(env, tool, {"customer_id": "CUS-P1", "new_payment_method": "abc"})["payment_method_last4"]
        == "****"
    )
    assert call(env, tool, {"customer_id": "CUS-NO", "new_payment_method": "tok"}) == failure(
        tool, "Customer not found: CUS-NO"
    )
    assert env.state_hash() == before


def test_read_only_set() -> None:
    assert "payment_api_process_charge" not in payments.READ_ONLY
    assert "payment_api_update_payment_method" in payments.READ_ONLY
