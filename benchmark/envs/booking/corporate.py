"""Corporate accounts API tools.

Accounts are found by their ``corporate_account_id`` field (row ids are often ``INT-...``), and every tool
first insists on the ``CRP-`` prefix.
"""

from __future__ import annotations

from typing import Any

from benchmark.envs.booking.inputs import (
    CorporateApiGenerateCorporateInvoiceInput,
    CorporateApiGetAccountDetailsInput,
    CorporateApiGetCorporateBookingHistoryInput,
    CorporateApiVerifyAccountStatusInput,
)
from benchmark.envs.booking.rows import Booking, CorporateAccount
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

ACCOUNTS: TableRef[CorporateAccount] = TableRef("corporate_api_corporate_accounts")
BOOKINGS: TableRef[Booking] = TableRef("booking_api_bookings")


def _account(env: Environment, corporate_account_id: str) -> CorporateAccount:
    if not corporate_account_id.startswith("CRP-"):
        raise ToolError("Invalid corporate_account_id parameter.")
    found = env.table(ACCOUNTS).where(corporate_account_id=corporate_account_id)
    if not found:
        raise ToolError("Corporate account not found.")
    return found[0]


def corporate_api_generate_corporate_invoice(
    env: Environment, args: CorporateApiGenerateCorporateInvoiceInput
) -> dict[str, Any]:
    """Invoice id/URL derived from the two ids; the booking must belong to the account. Nothing is stored."""
    if not args.corporate_account_id.startswith("CRP-"):
        raise ToolError("Invalid corporate_account_id parameter.")
    if not args.booking_reference.startswith("BKG-"):
        raise ToolError("Invalid booking_reference parameter.")
    account = _account(env, args.corporate_account_id)
    bookings = env.table(BOOKINGS).where(booking_reference=args.booking_reference)
    if not bookings:
        raise ToolError("Booking not found.")
    if bookings[0].corporate_account_id != account.corporate_account_id:
        raise ToolError("Booking is not associated with this corporate account.")
    booking_num = args.booking_reference.replace("BKG-", "")
    account_num = args.corporate_account_id.replace("CRP-", "")
    return {
        "invoice_url": (
            "https://staybridge.com/corporate-invoices/"
            f"{args.corporate_account_id}-{args.booking_reference}.pdf"
        ),
        "invoice_id": f"INV-{booking_num}-{account_num}",
        "payment_terms": account.payment_terms,
    }


def corporate_api_get_account_details(
    env: Environment, args: CorporateApiGetAccountDetailsInput
) -> dict[str, Any]:
    account = _account(env, args.corporate_account_id)
    return {"account_data": account.model_dump(mode="json", exclude_none=True)}


def corporate_api_get_corporate_booking_history(
    env: Environment, args: CorporateApiGetCorporateBookingHistoryInput
) -> dict[str, Any]:
    """The account's bookings, newest created_at text first (stable for ties)."""
    account = _account(env, args.corporate_account_id)
    bookings = env.table(BOOKINGS).where(corporate_account_id=account.corporate_account_id)
    bookings.sort(key=lambda b: b.created_at, reverse=True)
    return {"corporate_bookings": [b.model_dump(mode="json", exclude_none=True) for b in bookings]}


def corporate_api_verify_account_status(
    env: Environment, args: CorporateApiVerifyAccountStatusInput
) -> dict[str, Any]:
    """Active flag, expiry and booking_limit minus the account's confirmed bookings (floored at 0)."""
    account = _account(env, args.corporate_account_id)
    confirmed = len(
        env.table(BOOKINGS).where(
            corporate_account_id=account.corporate_account_id, booking_status="confirmed"
        )
    )
    rendered = account.model_dump(mode="json")
    return {
        "is_active": account.account_status.value == "active",
        "expiration_date": rendered["expiration_date"],
        "booking_limit_remaining": max(0, account.booking_limit - confirmed),
    }


TOOLS: dict[str, ToolFn] = {
    "corporate_api_generate_corporate_invoice": corporate_api_generate_corporate_invoice,
    "corporate_api_get_account_details": corporate_api_get_account_details,
    "corporate_api_get_corporate_booking_history": corporate_api_get_corporate_booking_history,
    "corporate_api_verify_account_status": corporate_api_verify_account_status,
}

READ_ONLY: frozenset[str] = frozenset(TOOLS)
