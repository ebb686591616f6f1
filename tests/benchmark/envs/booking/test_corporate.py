"""Corporate accounts API tools on a real Environment (SQLite in memory).

A small patch over the domain defaults: account CRP-T1 (row id INT-T1, booking limit 2, no expiry)
with two confirmed bookings and one cancelled booking, plus a booking of another account.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Environment
from benchmark.envs.booking import corporate
from tests.support.booking import booking
from tests.support.envs import Patch, call, failure


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def _booking(row_id: str, reference: str, account: str, status: str, created: str) -> dict[str, Any]:
    return booking(
        row_id,
        reference,
        hotel_id="HTL-00012345",
        booking_status=status,
        corporate_account_id=account,
        created_at=created,
        updated_at=created,
    )


PATCH = {
    "corporate_api_corporate_accounts": [
        {
            "id": "INT-T1",
            "corporate_account_id": "CRP-T1",
            "company_name": "Test Corp",
            "account_tier": "enterprise",
            "account_status": "active",
            "contact_name": "Pat Doe",
            "contact_email": "pat@test.example",
            "contact_phone": "+1-555-0100",
            "booking_limit": 2,
            "credit_limit": "1000.00",
            "payment_terms": "Net 30",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-06-01T00:00:00Z",
        }
    ],
    "booking_api_bookings": [
        _booking("BKG-ROW-1", "BKG-T1", "CRP-T1", "confirmed", "2025-09-01T10:00:00Z"),
        _booking("BKG-ROW-2", "BKG-T2", "CRP-T1", "confirmed", "2025-09-03T10:00:00Z"),
        _booking("BKG-ROW-3", "BKG-T3", "CRP-T1", "cancelled", "2025-09-02T10:00:00Z"),
        _booking("BKG-ROW-4", "BKG-T4", "CRP-00012345", "confirmed", "2025-09-04T10:00:00Z"),
    ],
}


def test_generate_corporate_invoice(env: Environment) -> None:
    out = call(
        env,
        "corporate_api_generate_corporate_invoice",
        {"booking_reference": "BKG-T1", "corporate_account_id": "CRP-T1"},
    )
    assert out == {
        "invoice_url": "https://staybridge.com/corporate-invoices/CRP-T1-BKG-T1.pdf",
        "invoice_id": "INV-T1-T1",
        "payment_terms": "Net 30",
    }


@pytest.mark.parametrize(
    ("booking", "account", "message"),
    [
        ("BKG-T1", "INT-T1", "Invalid corporate_account_id parameter."),
        ("T1", "CRP-T1", "Invalid booking_reference parameter."),
        ("BKG-T1", "CRP-NONE", "Corporate account not found."),
        ("BKG-NONE", "CRP-T1", "Booking not found."),
        ("BKG-T4", "CRP-T1", "Booking is not associated with this corporate account."),
    ],
)
def test_generate_corporate_invoice_errors(
    env: Environment, booking: str, account: str, message: str
) -> None:
    tool = "corporate_api_generate_corporate_invoice"
    out = call(env, tool, {"booking_reference": booking, "corporate_account_id": account})
    assert out == failure(tool, message)


def test_get_account_details_renders_row_without_nulls(env: Environment) -> None:
    out = call(env, "corporate_api_get_account_details", {"corporate_account_id": "CRP-T1"})
    account = out["account_data"]
    assert list(account)[:3] == ["table_name", "id", "corporate_account_id"]
    assert account["table_name"] == "corporate_accounts"
    assert account["id"] == "INT-T1"
    assert account["credit_limit"] == "1000.00"
    assert account["created_at"] == "2024-01-01T00:00:00Z"
    assert "expiration_date" not in account


def test_get_account_details_errors(env: Environment) -> None:
    tool = "corporate_api_get_account_details"
    assert call(env, tool, {"corporate_account_id": "INT-T1"}) == failure(
        tool, "Invalid corporate_account_id parameter."
    )
    assert call(env, tool, {"corporate_account_id": "CRP-NONE"}) == failure(
        tool, "Corporate account not found."
    )


def test_get_corporate_booking_history_newest_first(env: Environment) -> None:
    out = call(env, "corporate_api_get_corporate_booking_history", {"corporate_account_id": "CRP-T1"})
    bookings = out["corporate_bookings"]
    assert [b["booking_reference"] for b in bookings] == ["BKG-T2", "BKG-T3", "BKG-T1"]
    assert bookings[0]["booking_value"] == "380.00"
    assert "group_booking_id" not in bookings[0]
    assert bookings[0]["modification_history"] == []


def test_get_corporate_booking_history_unknown_account(env: Environment) -> None:
    tool = "corporate_api_get_corporate_booking_history"
    assert call(env, tool, {"corporate_account_id": "CRP-NONE"}) == failure(
        tool, "Corporate account not found."
    )


def test_verify_account_status_counts_confirmed_bookings(env: Environment) -> None:
    out = call(env, "corporate_api_verify_account_status", {"corporate_account_id": "CRP-T1"})
    assert out == {"is_active": True, "booking_limit_remaining": 0}
    default = call(env, "corporate_api_verify_account_status", {"corporate_account_id": "CRP-00024680"})
    assert default["is_active"] is False
    assert default["expiration_date"] == "2024-06-01T00:00:00Z"


def test_verify_account_status_errors(env: Environment) -> None:
    tool = "corporate_api_verify_account_status"
    assert call(env, tool, {}) == failure(
        tool, "Input validation failed: corporate_account_id: Field required"
    )
    assert call(env, tool, {"corporate_account_id": "crp-T1"}) == failure(
        tool, "Invalid corporate_account_id parameter."
    )


def test_all_corporate_tools_are_read_only() -> None:
    assert set(corporate.TOOLS) == corporate.READ_ONLY
