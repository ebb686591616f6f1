"""The StayBridge pack's tables and the policy's constants (room capacity, fee, refund and
compensation tables, ticket tags), and what the checks share: small helpers over values and change
sets, and state lookups (booking, hotel tier, account, group).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

BOOKINGS = "booking_api_bookings"
GROUPS = "booking_api_group_bookings"
PROFILES = "crm_api_customer_profiles"
TRANSACTIONS = "payment_api_transactions"
TICKETS = "zendesk_tickets"
COMMENT_TABLES = frozenset({"zendesk_comments", "zendesk_ticket_comments"})

AGENT_ID = "AG-83945"
RESOLVED_STATUSES = frozenset({"pending", "hold", "solved"})
USER_TYPE_TAGS = frozenset({"b2c-customer", "corporate-account", "group-coordinator", "hotel-partner"})
CHECK_IN_TAGS = frozenset({"check-in-today", "check-in-24h", "check-in-upcoming"})
SPECIAL_FLAG_TAGS = frozenset({"vip-customer", "repeat-issue", "hotel-partner-escalation"})
CATEGORY_TAGS = USER_TYPE_TAGS | CHECK_IN_TAGS | SPECIAL_FLAG_TAGS

# Appendix A.1 Room Type Capacity: (max adults, max children).
ROOM_CAPACITY = {
    "standard_room": (2, 2),
    "deluxe_room": (2, 2),
    "accessible_room": (2, 2),
    "suite": (4, 4),
    "executive_suite": (4, 4),
    "presidential_suite": (4, 4),
    "family_room": (4, 4),
}
# §4.1.3 base fees over all time windows, hotel tier multipliers, multiple-modification surcharges.
BASE_FEES = (0.0, 25.0, 50.0, 60.0)
TIER_MULTIPLIER = {"premium": 0.5, "standard": 1.0, "budget": 1.5}
# §4.2.2 refund percentages a hotel tier's cancellation table can give (0% = no refund).
TIER_REFUND_PERCENTAGES = {"budget": (1.0, 0.75, 0.5), "standard": (1.0, 0.5), "premium": (1.0,)}
SERVICE_FEE = 15.0
# §4.4.3 compensation percentages (service complaints and room condition issues, every band).
COMPENSATION_PERCENTAGES = (0.25, 0.5, 0.75, 1.0)
# §4.5.2 special accommodation fees with a fixed amount (the half-day rate is computed per booking).
SPECIAL_FEES = (0.0, 25.0, 30.0, 50.0)

PRICED_FIELDS = ("check_in_date", "check_out_date", "room_type", "board_type")
MODIFICATION_FIELDS = (*PRICED_FIELDS, "adults_count", "children_count")
TOLERANCE = 0.0101
CANCELLATION = "cancelled"


# -- small helpers ----------------------------------------------------------------------------------
def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return parsed if isinstance(parsed, list) else [parsed]
    return [value]


def _money(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _close(a: float, b: float, tolerance: float = TOLERANCE) -> bool:
    return abs(a - b) < tolerance


def _day(text: Any) -> dt.date | None:
    if not isinstance(text, str) or len(text) < 10:
        return None
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        return None


def _nights(booking: Mapping[str, Any]) -> int:
    start, end = _day(booking.get("check_in_date")), _day(booking.get("check_out_date"))
    if start is None or end is None:
        return 0
    return max((end - start).days, 0)


def _norm_reason(reason: Any) -> str:
    return re.sub(r"[\s\-]+", "_", str(reason or "").strip().lower())


def _changed(change: RowChange, field: str) -> bool:
    before = change.before or {}
    after = change.after or {}
    return change.op == "insert" or before.get(field) != after.get(field)


def _updates(ctx: CheckContext, table: str) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == table and change.op == "update" and change.before and change.after:
            yield change


def _inserted(ctx: CheckContext, table: str) -> Iterator[dict[str, Any]]:
    for change in ctx.changes:
        if change.table == table and change.op == "insert" and change.after:
            yield change.after


def _status(row: Mapping[str, Any] | None) -> str | None:
    return None if row is None else row.get("booking_status")


def _is_modification(change: RowChange) -> bool:
    """A booking update that changed what the guest booked, on a booking that stays confirmed."""
    assert change.before is not None and change.after is not None
    if _status(change.before) != "confirmed" or _status(change.after) != "confirmed":
        return False
    return any(_changed(change, f) for f in (*MODIFICATION_FIELDS, "special_requests"))


def _is_cancellation(change: RowChange) -> bool:
    return _status(change.before) != CANCELLATION and _status(change.after) == CANCELLATION


# -- state lookups ----------------------------------------------------------------------------------
_BOOKING_BY_REFERENCE = (
    "SELECT booking_reference, customer_id, hotel_id, check_in_date, check_out_date, booking_value,"
    " booking_status, corporate_account_id, group_booking_id"
    " FROM booking_api_bookings WHERE booking_reference = :ref"
)


def _booking(ctx: CheckContext, reference: Any) -> dict[str, Any] | None:
    if not reference:
        return None
    rows = ctx.query(
        _BOOKING_BY_REFERENCE,
        {"ref": str(reference)},
    )
    return rows[0] if rows else None


def _hotel(ctx: CheckContext, hotel_id: Any) -> dict[str, Any] | None:
    if not hotel_id:
        return None
    rows = ctx.query(
        "SELECT hotel_id, partner_tier, supports_pets, accessible_rooms_available"
        " FROM hotel_partner_api_hotels WHERE hotel_id = :hotel_id",
        {"hotel_id": str(hotel_id)},
    )
    return rows[0] if rows else None


def _tier(ctx: CheckContext, hotel_id: Any) -> str | None:
    hotel = _hotel(ctx, hotel_id)
    return None if hotel is None else hotel.get("partner_tier")


def _account(ctx: CheckContext, account_id: Any) -> dict[str, Any] | None:
    if not account_id:
        return None
    rows = ctx.query(
        "SELECT corporate_account_id, account_tier, account_status FROM corporate_api_corporate_accounts"
        " WHERE corporate_account_id = :account_id",
        {"account_id": str(account_id)},
    )
    return rows[0] if rows else None


def _active_tier(ctx: CheckContext, account_id: Any) -> str | None:
    """The corporate tier whose benefits apply: only an active account's (§3.3 status requirement)."""
    account = _account(ctx, account_id)
    if account is None or account.get("account_status") != "active":
        return None
    return account.get("account_tier")


def _vip_tier(ctx: CheckContext, customer_id: Any) -> str | None:
    if not customer_id:
        return None
    rows = ctx.query(
        "SELECT vip_tier FROM crm_api_customer_profiles WHERE customer_id = :customer_id",
        {"customer_id": str(customer_id)},
    )
    return rows[0]["vip_tier"] if rows else None


def _group(ctx: CheckContext, group_id: Any) -> dict[str, Any] | None:
    if not group_id:
        return None
    rows = ctx.query(
        "SELECT group_booking_id, total_rooms, hotel_id, booking_references FROM booking_api_group_bookings"
        " WHERE group_booking_id = :group_id",
        {"group_id": str(group_id)},
    )
    return rows[0] if rows else None


def _group_references(ctx: CheckContext, group_id: Any) -> set[str]:
    """The group's bookings: those its record lists and those that carry its group_booking_id."""
    refs: set[str] = set()
    group = _group(ctx, group_id)
    if group is not None:
        refs.update(str(r) for r in _list(group.get("booking_references")))
    rows = ctx.query(
        "SELECT booking_reference FROM booking_api_bookings WHERE group_booking_id = :group_id",
        {"group_id": str(group_id)},
    )
    refs.update(r["booking_reference"] for r in rows)
    return refs


def _unit(ctx: CheckContext, booking: Mapping[str, Any]) -> tuple[str, set[str]]:
    """The bookings whose payments belong together: the booking, or its whole group (§4.7.3: group
    refunds and charges are processed on the group's first booking reference)."""
    group_id = booking.get("group_booking_id")
    if group_id:
        return f"group:{group_id}", _group_references(ctx, group_id) | {booking["booking_reference"]}
    return f"booking:{booking['booking_reference']}", {booking["booking_reference"]}


def _session_money(ctx: CheckContext, refs: set[str]) -> tuple[float, float]:
    """Charges and refunds the session processed on these bookings."""
    charges = refunds = 0.0
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("booking_reference") not in refs:
            continue
        amount = _money(txn.get("amount")) or 0.0
        if txn.get("transaction_type") == "charge":
            charges += amount
        elif txn.get("transaction_type") == "refund":
            refunds += amount
    return charges, refunds


def _sums(options: Iterable[Iterable[float]]) -> set[float]:
    """Every total reachable by picking one amount from each option list (rounded to cents)."""
    totals = {0.0}
    for choice in options:
        totals = {round(t + c, 2) for t in totals for c in choice}
    return totals


def _fits(amount: float, allowed: Iterable[float], tolerance: float = TOLERANCE) -> bool:
    return any(_close(amount, a, tolerance) for a in allowed)
