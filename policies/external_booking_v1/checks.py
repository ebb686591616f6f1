"""Python checks of the StayBridge (external_booking_v1) pack.

SQL checks see the state; these also need what a call (after_call) or the whole session (at_commit)
changed, list-valued columns (tags, booking references, special requests), date arithmetic (nights
of a stay) or a set of amounts the policy's formulas allow. Each function receives a
:class:`guard.checks.CheckContext` and returns violating rows. None of them reads the agent's call
history: "what the session did" is the net row-level change set, never the sequence of calls.

Amounts the policy computes from the time until check-in (modification fees, cancellation refund
percentages) are checked against the *set* of values the formula can produce over every time window,
because the policy's clock is not part of the state (see README.md, "Not enforced").
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


# -- bookings: what a modification call did (after_call) ---------------------------------------------
def group_members_confirmed(ctx: CheckContext) -> list[dict[str, Any]]:
    """A group modification that changed a member booking which was not confirmed."""
    return [
        {"booking_reference": c.before.get("booking_reference"), "booking_status": _status(c.before)}
        for c in _updates(ctx, BOOKINGS)
        if c.before is not None and _status(c.before) != "confirmed"
    ]


def room_capacity(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _updates(ctx, BOOKINGS):
        after = change.after
        assert after is not None
        if not any(_changed(change, f) for f in ("room_type", "adults_count", "children_count")):
            continue
        limits = ROOM_CAPACITY.get(str(after.get("room_type")))
        if limits is None:
            continue
        adults, children = int(after.get("adults_count") or 0), int(after.get("children_count") or 0)
        if adults > limits[0] or children > limits[1]:
            out.append(
                {
                    "booking_reference": after.get("booking_reference"),
                    "room_type": after.get("room_type"),
                    "adults_count": adults,
                    "children_count": children,
                    "max_adults": limits[0],
                    "max_children": limits[1],
                }
            )
    return out


def available_inventory(ctx: CheckContext) -> list[dict[str, Any]]:
    """A modification to dates, room or board whose new stay includes a night the hotel has sold out."""
    out = []
    for change in _updates(ctx, BOOKINGS):
        after = change.after
        assert after is not None
        if not any(_changed(change, f) for f in PRICED_FIELDS):
            continue
        start, end = _day(after.get("check_in_date")), _day(after.get("check_out_date"))
        if start is None or end is None:
            continue
        rows = ctx.query(
            "SELECT date, available_count FROM booking_api_hotel_inventory"
            " WHERE hotel_id = :hotel_id AND room_type = :room_type AND board_type = :board_type",
            {
                "hotel_id": str(after.get("hotel_id")),
                "room_type": str(after.get("room_type")),
                "board_type": str(after.get("board_type")),
            },
        )
        for row in rows:
            night = _day(row.get("date"))
            if night is not None and start <= night < end and int(row.get("available_count") or 0) <= 0:
                out.append(
                    {
                        "booking_reference": after.get("booking_reference"),
                        "night": night.isoformat(),
                        "room_type": after.get("room_type"),
                        "board_type": after.get("board_type"),
                        "available_count": row.get("available_count"),
                    }
                )
    return out


def accessible_room_available(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _updates(ctx, BOOKINGS):
        after = change.after
        assert after is not None
        if not _changed(change, "room_type") or after.get("room_type") != "accessible_room":
            continue
        hotel = _hotel(ctx, after.get("hotel_id"))
        if hotel is not None and not hotel.get("accessible_rooms_available"):
            out.append({"booking_reference": after.get("booking_reference"), "hotel_id": hotel["hotel_id"]})
    return out


_PET = re.compile(r"\b(pets?|dogs?|cats?|puppy|kitten)\b", re.IGNORECASE)


def pets_supported(ctx: CheckContext) -> list[dict[str, Any]]:
    """A pet request added to a booking at a hotel that does not take pets."""
    out = []
    for change in _updates(ctx, BOOKINGS):
        before = {str(r) for r in _list((change.before or {}).get("special_requests"))}
        added = [str(r) for r in _list((change.after or {}).get("special_requests")) if str(r) not in before]
        pets = [r for r in added if _PET.search(r)]
        if not pets:
            continue
        assert change.after is not None
        hotel = _hotel(ctx, change.after.get("hotel_id"))
        if hotel is not None and not hotel.get("supports_pets"):
            out.append(
                {
                    "booking_reference": change.after.get("booking_reference"),
                    "hotel_id": hotel["hotel_id"],
                    "special_requests": pets,
                }
            )
    return out


def mid_market_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    """A mid-market corporate booking of $1,000 or more modified (before and after the change)."""
    out = []
    for change in _updates(ctx, BOOKINGS):
        before, after = change.before, change.after
        assert before is not None and after is not None
        if not _is_modification(change):
            continue
        if _active_tier(ctx, before.get("corporate_account_id")) != "mid_market":
            continue
        original, projected = _money(before.get("booking_value")), _money(after.get("booking_value"))
        if original is not None and projected is not None and original >= 1000 and projected >= 1000:
            out.append(
                {
                    "booking_reference": before.get("booking_reference"),
                    "corporate_account_id": before.get("corporate_account_id"),
                    "original_booking_value": original,
                    "projected_booking_value": projected,
                }
            )
    return out


def large_group_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    """A booking of a group of 16+ rooms modified at a hotel that is not a premium partner."""
    out = []
    seen: set[str] = set()
    groups: list[tuple[Any, Any]] = []
    for change in _updates(ctx, BOOKINGS):
        if _is_modification(change):
            assert change.before is not None
            groups.append((change.before.get("group_booking_id"), change.before.get("hotel_id")))
    for change in _updates(ctx, GROUPS):
        assert change.after is not None
        groups.append((change.after.get("group_booking_id"), change.after.get("hotel_id")))
    for group_id, hotel_id in groups:
        if not group_id or group_id in seen:
            continue
        seen.add(group_id)
        group = _group(ctx, group_id)
        if group is None or int(group.get("total_rooms") or 0) < 16:
            continue
        tier = _tier(ctx, hotel_id or group.get("hotel_id"))
        if tier != "premium":
            out.append(
                {"group_booking_id": group_id, "total_rooms": group.get("total_rooms"), "partner_tier": tier}
            )
    return out


# -- payments ---------------------------------------------------------------------------------------
def post_stay_amount(ctx: CheckContext) -> list[dict[str, Any]]:
    """A post_stay_compensation refund must be a §4.4.3 percentage of the affected nights' value."""
    assert ctx.call is not None
    args = ctx.call.arguments
    if _norm_reason(args.get("reason")) != "post_stay_compensation":
        return []
    booking = _booking(ctx, args.get("booking_reference"))
    amount = _money(args.get("refund_amount"))
    if booking is None or amount is None:
        return []
    value = _money(booking.get("booking_value")) or 0.0
    nights = max(_nights(booking), 1)
    nightly = value / nights
    allowed = {
        round(round(nightly * k, 2) * p, 2) for k in range(1, nights + 1) for p in COMPENSATION_PERCENTAGES
    }
    allowed |= {round(value * p, 2) for p in COMPENSATION_PERCENTAGES}
    if _fits(amount, allowed, 0.0151):
        return []
    return [
        {
            "booking_reference": booking["booking_reference"],
            "refund_amount": amount,
            "booking_value": value,
            "nights": nights,
        }
    ]


_TOKEN = re.compile(r"tok_card_ending_[0-9]{4}")


def payment_token_format(ctx: CheckContext) -> list[dict[str, Any]]:
    assert ctx.call is not None
    token = ctx.call.arguments.get("new_payment_method")
    if isinstance(token, str) and _TOKEN.fullmatch(token):
        return []
    return [{"new_payment_method": token, "expected": "tok_card_ending_XXXX"}]


def invoice_type_by_account(ctx: CheckContext) -> list[dict[str, Any]]:
    """invoice_type is "receipt", or "invoice" for a corporate account holder with an active account."""
    assert ctx.call is not None
    args = ctx.call.arguments
    invoice_type = args.get("invoice_type")
    if invoice_type == "receipt":
        return []
    booking = _booking(ctx, args.get("booking_reference"))
    if invoice_type == "invoice":
        if booking is None or _active_tier(ctx, booking.get("corporate_account_id")) is not None:
            return []
        if _email_domain_has_active_account(ctx, booking.get("customer_id")):
            return []
        return [
            {
                "booking_reference": args.get("booking_reference"),
                "invoice_type": invoice_type,
                "corporate_account_id": booking.get("corporate_account_id"),
            }
        ]
    return [{"booking_reference": args.get("booking_reference"), "invoice_type": invoice_type}]


def _email_domain_has_active_account(ctx: CheckContext, customer_id: Any) -> bool:
    """§3.1: a corporate account holder is also one whose email domain matches a corporate account."""
    if not customer_id:
        return False
    rows = ctx.query(
        "SELECT email FROM crm_api_customer_profiles WHERE customer_id = :customer_id",
        {"customer_id": str(customer_id)},
    )
    domains = {str(r["email"]).rpartition("@")[2].lower() for r in rows if r.get("email")}
    if not domains:
        return False
    accounts = ctx.query("SELECT contact_email, account_status FROM corporate_api_corporate_accounts", {})
    return any(
        a.get("account_status") == "active"
        and str(a.get("contact_email") or "").rpartition("@")[2].lower() in domains
        for a in accounts
    )


# -- at commit: money that must follow from what the session changed ---------------------------------
def _modification_fee_options(
    ctx: CheckContext, unit_key: str, changes: list[RowChange]
) -> tuple[set[float], dict[str, Any]]:
    """The fee totals the policy allows for the session's modifications of one unit."""
    first = changes[0].before
    assert first is not None
    corporate = _active_tier(ctx, first.get("corporate_account_id"))
    multiplier = TIER_MULTIPLIER.get(str(_tier(ctx, first.get("hotel_id"))), 1.0)
    free = corporate == "enterprise"  # §4.1.4: modification_fee = $0, always
    waived = False
    if corporate == "mid_market" and (_money(first.get("booking_value")) or 0) >= 1000:
        waived = True  # §4.1.4: fees waived once the manager approved
    if _vip_tier(ctx, first.get("customer_id")) == "platinum":
        waived = True  # §4.1.4: all fees waived at >= 24 hours (a window the state cannot tell)
    priced = [c for c in changes if any(_changed(c, f) for f in MODIFICATION_FIELDS)]
    special = [c for c in changes if _changed(c, "special_requests")]
    options: list[list[float]] = []
    if priced:
        if unit_key.startswith("group:"):
            # §4.7.3: total_fee = base_per_room_fee x number_of_rooms_modified x hotel_tier_multiplier
            fees = [round(b * len(priced) * multiplier, 2) for b in BASE_FEES]
        else:
            # §4.1.3: (base_fee x multiplier) + surcharge by the number of earlier modifications;
            # several modification calls on one booking in a session may be one request or several.
            booking = priced[0]
            assert booking.before is not None and booking.after is not None
            earlier = len(_list(booking.before.get("modification_history")))
            added = max(len(_list(booking.after.get("modification_history"))) - earlier, 1)
            fees_by_count: set[float] = set()
            for count in range(1, added + 1):
                per_call = [
                    [round(b * multiplier + _surcharge(earlier + i), 2) for b in BASE_FEES]
                    for i in range(count)
                ]
                fees_by_count |= _sums(per_call)
            fees = sorted(fees_by_count)
        options.append([0.0] if free else [*fees, 0.0] if waived else fees)
    for change in special:
        assert change.after is not None
        value = _money(change.after.get("booking_value")) or 0.0
        nights = max(_nights(change.after), 1)
        half_day = round(0.5 * value / nights, 2)
        fee_list = [*SPECIAL_FEES, half_day]
        # §4.5.2 fees are per accommodation; a request may add two (early check-in, late checkout).
        options.append(sorted(_sums([fee_list, fee_list])))
    facts = {"corporate_tier": corporate, "hotel_multiplier": multiplier, "fees_waived": free or waived}
    return _sums(options), facts


def _surcharge(previous: int) -> float:
    return 0.0 if previous <= 0 else 15.0 if previous == 1 else 30.0


def modification_charges(ctx: CheckContext) -> list[dict[str, Any]]:
    """Charges minus refunds on a modified booking = price difference + a fee the schedule allows."""
    units: dict[str, tuple[set[str], list[RowChange]]] = {}
    cancelled_units: set[str] = set()
    for change in _updates(ctx, BOOKINGS):
        assert change.before is not None
        key, refs = _unit(ctx, change.before)
        if _is_cancellation(change):
            cancelled_units.add(key)
        elif _is_modification(change) or _changed(change, "booking_value"):
            units.setdefault(key, (refs, []))[1].append(change)
    out = []
    for key, (refs, changes) in units.items():
        if key in cancelled_units:
            continue  # a unit with cancellations is checked by cancellation_refunds
        modified = [c for c in changes if _is_modification(c)]
        if not modified:
            continue
        difference = sum(
            (_money((c.after or {}).get("booking_value")) or 0.0)
            - (_money((c.before or {}).get("booking_value")) or 0.0)
            for c in changes
        )
        charges, refunds = _session_money(ctx, refs)
        fee = (charges - refunds) - difference
        allowed, facts = _modification_fee_options(ctx, key, modified)
        if not _fits(fee, allowed, 0.0151):
            out.append(
                {
                    "bookings": sorted(str((c.before or {}).get("booking_reference")) for c in modified),
                    "price_difference": round(difference, 2),
                    "charged": round(charges, 2),
                    "refunded": round(refunds, 2),
                    "implied_fee": round(fee, 2),
                    **facts,
                }
            )
    return out


def charges_follow_a_change(ctx: CheckContext) -> list[dict[str, Any]]:
    """A charge the session processed on a booking (or group) that the session did not change."""
    changed_refs = {str((c.before or {}).get("booking_reference")) for c in _updates(ctx, BOOKINGS)}
    changed_groups = {str((c.after or {}).get("group_booking_id")) for c in _updates(ctx, GROUPS)}
    out = []
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") != "charge":
            continue
        booking = _booking(ctx, txn.get("booking_reference"))
        if booking is None:
            continue
        _, refs = _unit(ctx, booking)
        if refs & changed_refs or (booking.get("group_booking_id") or "") in changed_groups:
            continue
        out.append(
            {
                "transaction_id": txn.get("transaction_id"),
                "booking_reference": txn.get("booking_reference"),
                "amount": txn.get("amount"),
            }
        )
    return out


def cancellation_refunds(ctx: CheckContext) -> list[dict[str, Any]]:
    """Refunds for the session's cancellations = one of the §4.2 formula's outcomes per room."""
    units: dict[str, tuple[set[str], list[dict[str, Any]]]] = {}
    for change in _updates(ctx, BOOKINGS):
        if _is_cancellation(change):
            assert change.before is not None
            key, refs = _unit(ctx, change.before)
            units.setdefault(key, (refs, []))[1].append(change.before)
    modified_refs = {
        str((c.before or {}).get("booking_reference")) for c in _updates(ctx, BOOKINGS) if _is_modification(c)
    }
    out = []
    for refs, rooms in units.values():
        if refs & modified_refs:
            continue  # modified and cancelled rooms of one group: their money cannot be told apart
        options = []
        for room in rooms:
            value = _money(room.get("booking_value")) or 0.0
            tier = str(_tier(ctx, room.get("hotel_id")))
            room_options = {0.0, round(value, 2)}  # 0% window; platinum / system error: 100%, no fee
            for pct in TIER_REFUND_PERCENTAGES.get(tier, (1.0, 0.75, 0.5)):
                room_options.add(max(round(value * pct - SERVICE_FEE, 2), 0.0))
            room_options.add(max(round(value - SERVICE_FEE, 2), 0.0))  # enterprise >= 48 hours
            options.append(sorted(room_options))
        _, refunds = _session_money(ctx, refs)
        if not _fits(refunds, _sums(options), TOLERANCE * max(len(rooms), 1)):
            out.append(
                {
                    "cancelled_bookings": sorted(str(r.get("booking_reference")) for r in rooms),
                    "booking_values": [r.get("booking_value") for r in rooms],
                    "refunded": round(refunds, 2),
                }
            )
    return out


# -- customer profile -------------------------------------------------------------------------------
def complaint_count_increment(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _updates(ctx, PROFILES):
        assert change.before is not None and change.after is not None
        before, after = change.before.get("complaint_count"), change.after.get("complaint_count")
        if before == after:
            continue
        if int(after or 0) != int(before or 0) + 1:
            out.append({"customer_id": change.after.get("customer_id"), "complaint_count": [before, after]})
    return out


def complaint_counted(ctx: CheckContext) -> list[dict[str, Any]]:
    """A post-stay compensation refund whose customer's complaint_count was not incremented."""
    raised = {
        str((c.after or {}).get("customer_id"))
        for c in _updates(ctx, PROFILES)
        if int((c.after or {}).get("complaint_count") or 0)
        > int((c.before or {}).get("complaint_count") or 0)
    }
    out = []
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") != "refund":
            continue
        if _norm_reason(txn.get("reason")) != "post_stay_compensation":
            continue
        if str(txn.get("customer_id")) not in raised:
            out.append(
                {
                    "transaction_id": txn.get("transaction_id"),
                    "booking_reference": txn.get("booking_reference"),
                    "customer_id": txn.get("customer_id"),
                }
            )
    return out


# -- Zendesk tickets: what a call wrote (after_call) --------------------------------------------------
def _written_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == TICKETS and change.after is not None:
            yield change


def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def tickets_assigned_to_agent(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        assignee = change.after.get("assignee_id")
        if _changed(change, "assignee_id") and str(assignee) != AGENT_ID:
            out.append({"ticket_id": change.key, "assignee_id": assignee})
    return out


def ticket_status_lifecycle(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        status = change.after.get("status")
        if change.op == "insert" and status != "open":
            out.append({"ticket_id": change.key, "status": status, "expected": "open"})
        elif _changed(change, "status") and status == "closed":
            out.append({"ticket_id": change.key, "status": status})
    return out


def no_organization_or_due_date(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        for field in ("organization_id", "due_at"):
            if _changed(change, field) and change.after.get(field) not in (None, ""):
                out.append({"ticket_id": change.key, "field": field, "value": change.after.get(field)})
    return out


def no_problem_type(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "type": "problem"}
        for c in _written_tickets(ctx)
        if c.after is not None and _changed(c, "type") and c.after.get("type") == "problem"
    ]


CREATION_FIELDS = ("subject", "description", "status", "priority", "type", "requester_id", "assignee_id")


def creation_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        if change.op != "insert":
            continue
        assert change.after is not None
        missing = [f for f in CREATION_FIELDS if change.after.get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


# -- Zendesk tickets at commit ------------------------------------------------------------------------
def _agent_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    """Tickets the agent created or changed in the session.

    The hotel escalation tool opens an internal tracking ticket of its own (§4.9.3); it has no
    assignee, while every ticket the agent creates is assigned to the agent (tickets_assigned_to_agent),
    so an inserted ticket without an assignee is the tool's, not the agent's.
    """
    for change in _written_tickets(ctx):
        assert change.after is not None
        if change.op == "update" or change.after.get("assignee_id"):
            yield change


def _tracking_tickets(ctx: CheckContext) -> Iterator[dict[str, Any]]:
    for change in _written_tickets(ctx):
        assert change.after is not None
        if (
            change.op == "insert"
            and not change.after.get("assignee_id")
            and change.after.get("escalation_reason")
        ):
            yield change.after


def _resolved(ctx: CheckContext) -> Iterator[tuple[str, dict[str, Any]]]:
    for change in _agent_tickets(ctx):
        assert change.after is not None
        if change.after.get("status") in RESOLVED_STATUSES:
            yield change.key, change.after


def tickets_resolved(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": (c.after or {}).get("status")}
        for c in _agent_tickets(ctx)
        if (c.after or {}).get("status") not in RESOLVED_STATUSES
    ]


def every_request_has_a_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    if any(True for _ in _agent_tickets(ctx)):
        return []
    return [{"tickets_written": 0, "tables_written": sorted({c.table for c in ctx.changes})}]


def resolution_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        needed = ["request_type_detail"]
        if ticket.get("status") == "solved":
            needed += ["type", "priority", "resolution_action", "refund_amount"]
        missing = [f for f in needed if ticket.get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": key, "status": ticket.get("status"), "missing": missing})
    return out


MODIFY_OR_CANCEL = frozenset(
    {"modify-dates", "modify-guests", "modify-room-type", "modify-board-type", "cancel-booking"}
)


def booking_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    """A resolved ticket about an existing booking carries its hotel_id and booking_value (and the
    check-in date for a modification or cancellation)."""
    out = []
    for key, ticket in _resolved(ctx):
        if _booking(ctx, ticket.get("booking_reference")) is None:
            continue
        needed = ["hotel_id", "booking_value"]
        if ticket.get("request_type_detail") in MODIFY_OR_CANCEL:
            needed.append("check_in_date")
        missing = [f for f in needed if ticket.get(f) in (None, "")]
        if missing:
            out.append(
                {"ticket_id": key, "booking_reference": ticket.get("booking_reference"), "missing": missing}
            )
    return out


def booking_fields_match(ctx: CheckContext) -> list[dict[str, Any]]:
    """hotel_id / corporate_account_id / group_booking_id on a ticket are those of its booking."""
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is None:
            continue
        for field in ("hotel_id", "corporate_account_id", "group_booking_id"):
            given, actual = ticket.get(field), booking.get(field)
            if given not in (None, "") and actual not in (None, "") and given != actual:
                out.append(
                    {
                        "ticket_id": change.key,
                        "booking_reference": ticket.get("booking_reference"),
                        "field": field,
                        "ticket": given,
                        "booking": actual,
                    }
                )
    return out


def group_first_reference(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        group = _group(ctx, ticket.get("group_booking_id"))
        if group is None:
            continue
        refs = [str(r) for r in _list(group.get("booking_references"))]
        if refs and ticket.get("booking_reference") != refs[0]:
            out.append(
                {
                    "ticket_id": change.key,
                    "group_booking_id": ticket.get("group_booking_id"),
                    "booking_reference": ticket.get("booking_reference"),
                    "first_booking_reference": refs[0],
                }
            )
    return out


def _tags(ticket: Mapping[str, Any]) -> list[str]:
    return [str(t) for t in _list(ticket.get("tags"))]


def user_type_tag(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        tags = [t.lower() for t in _tags(ticket)]
        user = [t for t in tags if t in USER_TYPE_TAGS]
        timing = [t for t in tags if t in CHECK_IN_TAGS]
        if len(user) != 1 or len(timing) > 1:
            out.append({"ticket_id": key, "user_type_tags": user, "check_in_tags": timing})
    return out


def tags_from_categories(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        unknown = [t for t in _tags(ticket) if t.lower() not in CATEGORY_TAGS]
        if unknown:
            out.append({"ticket_id": key, "tags": unknown})
    return out


def b2c_tag_matches_booking(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        if "b2c-customer" not in {t.lower() for t in _tags(ticket)}:
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is None:
            continue
        if booking.get("corporate_account_id") or booking.get("group_booking_id"):
            out.append(
                {
                    "ticket_id": key,
                    "booking_reference": booking["booking_reference"],
                    "corporate_account_id": booking.get("corporate_account_id"),
                    "group_booking_id": booking.get("group_booking_id"),
                }
            )
    return out


def requester_is_booking_customer(ctx: CheckContext) -> list[dict[str, Any]]:
    """A traveler's ticket about a booking: its requester is the Zendesk user with the email of the
    booking's customer. Hotel partners, corporate accounts and group coordinators may ask about a
    booking that is not their own, so their tickets are left alone."""
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after or {}
        if not _changed(change, "requester_id") or not ticket.get("requester_id"):
            continue
        if {t.lower() for t in _tags(ticket)} & (USER_TYPE_TAGS - {"b2c-customer"}):
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is None or booking.get("corporate_account_id") or booking.get("group_booking_id"):
            continue
        rows = ctx.query(
            "SELECT u.email AS requester_email, p.email AS customer_email"
            " FROM zendesk_users AS u, crm_api_customer_profiles AS p"
            " WHERE u.id = :requester AND p.customer_id = :customer",
            {"requester": str(ticket["requester_id"]), "customer": str(booking["customer_id"])},
        )
        if (
            rows
            and str(rows[0]["requester_email"]).strip().lower()
            != str(rows[0]["customer_email"]).strip().lower()
        ):
            out.append(
                {
                    "ticket_id": change.key,
                    "requester_id": ticket["requester_id"],
                    "booking_reference": booking["booking_reference"],
                    **rows[0],
                }
            )
    return out


def _ticket_refs(ctx: CheckContext, ticket: Mapping[str, Any]) -> set[str]:
    """The bookings a ticket's refund may be recorded on: its booking, or its group's bookings."""
    refs = {str(ticket.get("booking_reference"))} if ticket.get("booking_reference") else set()
    if ticket.get("group_booking_id"):
        refs |= _group_references(ctx, ticket.get("group_booking_id"))
    return refs


def refund_amount_recorded(ctx: CheckContext) -> list[dict[str, Any]]:
    """Refunds processed in the session on a booking appear as the refund_amount of its ticket."""
    by_ref: dict[str, float] = {}
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") == "refund":
            ref = str(txn.get("booking_reference"))
            by_ref[ref] = by_ref.get(ref, 0.0) + (_money(txn.get("amount")) or 0.0)
    if not by_ref:
        return []
    tickets = [(key, t, _ticket_refs(ctx, t)) for key, t in _resolved(ctx)]
    out = []
    for ref, refunded in by_ref.items():
        about = [(key, t, refs) for key, t, refs in tickets if ref in refs]
        if not about:
            continue  # no resolved ticket names the booking; resolution_fields covers the ticket
        recorded = [_money(t.get("refund_amount")) or 0.0 for _, t, _ in about]
        unit_refunded = sum(v for r, v in by_ref.items() if r in about[0][2])
        if any(_close(x, refunded) or _close(x, unit_refunded) for x in recorded):
            continue
        if _close(sum(recorded), refunded) or _close(sum(recorded), unit_refunded):
            continue
        out.append(
            {
                "booking_reference": ref,
                "refunded": round(refunded, 2),
                "tickets": [key for key, _, _ in about],
                "refund_amount": recorded,
            }
        )
    return out


def refund_amount_processed(ctx: CheckContext) -> list[dict[str, Any]]:
    """A refund_amount above 0 set in the session is a refund processed on the ticket's booking(s)."""
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        amount = _money(ticket.get("refund_amount")) or 0.0
        if amount <= 0 or not _changed(change, "refund_amount"):
            continue
        refs = _ticket_refs(ctx, ticket)
        rows = []
        for ref in refs:
            rows += ctx.query(
                "SELECT amount, payment_status FROM payment_api_transactions"
                " WHERE booking_reference = :ref AND transaction_type = 'refund'",
                {"ref": ref},
            )
        amounts = [_money(r.get("amount")) or 0.0 for r in rows if r.get("payment_status") != "failed"]
        session = [
            _money(t.get("amount")) or 0.0
            for t in _inserted(ctx, TRANSACTIONS)
            if t.get("transaction_type") == "refund" and str(t.get("booking_reference")) in refs
        ]
        candidates = {*amounts, sum(amounts), sum(session)}
        if not _fits(amount, candidates):
            out.append(
                {
                    "ticket_id": change.key,
                    "booking_reference": ticket.get("booking_reference"),
                    "refund_amount": amount,
                    "refunds_on_record": amounts,
                }
            )
    return out


def refund_resolution_has_amount(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {
            "ticket_id": key,
            "resolution_action": t.get("resolution_action"),
            "refund_amount": t.get("refund_amount"),
        }
        for key, t in _resolved(ctx)
        if t.get("resolution_action") in ("refund-full", "refund-partial")
        and (_money(t.get("refund_amount")) or 0) <= 0
    ]


def escalation_recorded(ctx: CheckContext) -> list[dict[str, Any]]:
    """An escalation to the hotel in the session shows as the escalation_reason of the customer ticket."""
    agent = [t.after for t in _agent_tickets(ctx) if t.after is not None]
    out = []
    for tracking in _tracking_tickets(ctx):
        booking = _booking(ctx, tracking.get("booking_reference"))
        refs = {str(tracking.get("booking_reference"))}
        if booking is not None:
            refs |= _unit(ctx, booking)[1]
        reason = tracking.get("escalation_reason")
        if any(
            t.get("escalation_reason") == reason
            and (str(t.get("booking_reference")) in refs or _ticket_refs(ctx, t) & refs)
            for t in agent
        ):
            continue
        out.append({"booking_reference": tracking.get("booking_reference"), "escalation_reason": reason})
    return out


def _reason_problem(
    ctx: CheckContext, reason: Any, booking: Mapping[str, Any] | None, group_id: Any
) -> str | None:
    if booking is None:
        return None
    if reason == "large-group-booking":
        group = _group(ctx, group_id or booking.get("group_booking_id"))
        if group is None or int(group.get("total_rooms") or 0) < 16:
            return "large-group-booking needs a group of 16 or more rooms"
    elif reason == "high-value-dispute":
        if (_money(booking.get("booking_value")) or 0) <= 2000:
            return "high-value-dispute needs a booking_value above $2,000"
    elif reason == "guest-complaint":
        if booking.get("booking_status") != "checked_out":
            return "guest-complaint is a post-stay complaint (booking checked_out)"
    elif reason == "same-day-modification" and _tier(ctx, booking.get("hotel_id")) == "budget":
        return "budget partner hotels do not take same-day modifications"
    return None


def ticket_escalation_reason_fits(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        if not _changed(change, "escalation_reason") or not ticket.get("escalation_reason"):
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        problem = _reason_problem(
            ctx, ticket.get("escalation_reason"), booking, ticket.get("group_booking_id")
        )
        if problem:
            out.append(
                {
                    "ticket_id": change.key,
                    "booking_reference": ticket.get("booking_reference"),
                    "escalation_reason": ticket.get("escalation_reason"),
                    "problem": problem,
                }
            )
    return out


# -- Zendesk tickets at commit: what the ticket says about what the session did ------------------------
def _tickets_about(ctx: CheckContext, refs: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """Resolved agent tickets whose booking (or group) is one of these bookings."""
    return [(key, t) for key, t in _resolved(ctx) if _ticket_refs(ctx, t) & refs]


def _session_bookings(ctx: CheckContext) -> Iterator[tuple[RowChange, set[str]]]:
    for change in _updates(ctx, BOOKINGS):
        assert change.before is not None
        yield change, _unit(ctx, change.before)[1]


def _session_refunds(ctx: CheckContext) -> Iterator[dict[str, Any]]:
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") == "refund":
            yield txn


def dispute_case_resolution(ctx: CheckContext) -> list[dict[str, Any]]:
    """§4.3.2: after a dispute case, the ticket is solved as billing-inquiry / information-provided."""
    out = []
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") != "dispute":
            continue
        ref = str(txn.get("booking_reference"))
        booking = _booking(ctx, ref)
        refs = _unit(ctx, booking)[1] if booking is not None else {ref}
        about = _tickets_about(ctx, refs)
        if not about:
            continue
        if any(
            t.get("status") == "solved"
            and t.get("request_type_detail") == "billing-inquiry"
            and t.get("resolution_action") == "information-provided"
            for _, t in about
        ):
            continue
        out.append(
            {
                "dispute_case_id": txn.get("transaction_id"),
                "booking_reference": ref,
                "tickets": [
                    {k: t.get(k) for k in ("status", "request_type_detail", "resolution_action")}
                    | {"id": key}
                    for key, t in about
                ],
            }
        )
    return out


def cancellation_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change, refs in _session_bookings(ctx):
        if not _is_cancellation(change):
            continue
        about = _tickets_about(ctx, refs)
        if about and not any(t.get("request_type_detail") == "cancel-booking" for _, t in about):
            out.append(
                {
                    "booking_reference": (change.before or {}).get("booking_reference"),
                    "tickets": {key: t.get("request_type_detail") for key, t in about},
                }
            )
    return out


def post_stay_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for txn in _session_refunds(ctx):
        if _norm_reason(txn.get("reason")) != "post_stay_compensation":
            continue
        ref = str(txn.get("booking_reference"))
        booking = _booking(ctx, ref)
        refs = _unit(ctx, booking)[1] if booking is not None else {ref}
        about = _tickets_about(ctx, refs)
        if about and not any(t.get("request_type_detail") == "post-stay-issue" for _, t in about):
            out.append(
                {"booking_reference": ref, "tickets": {key: t.get("request_type_detail") for key, t in about}}
            )
    return out


MODIFICATION_TYPES = (
    (("check_in_date", "check_out_date"), "modify-dates"),
    (("adults_count", "children_count"), "modify-guests"),
    (("room_type",), "modify-room-type"),
    (("board_type",), "modify-board-type"),
    (("special_requests",), "add-special-request"),
)


def modification_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    """A booking changed in one respect only: its customer ticket names that modification type."""
    out = []
    for change, refs in _session_bookings(ctx):
        if not _is_modification(change):
            continue
        kinds = [kind for fields, kind in MODIFICATION_TYPES if any(_changed(change, f) for f in fields)]
        if len(kinds) != 1:
            continue
        about = [
            (key, t)
            for key, t in _tickets_about(ctx, refs)
            if "hotel-partner" not in {x.lower() for x in _tags(t)}
        ]
        if about and not any(t.get("request_type_detail") == kinds[0] for _, t in about):
            out.append(
                {
                    "booking_reference": (change.before or {}).get("booking_reference"),
                    "expected": kinds[0],
                    "tickets": {key: t.get("request_type_detail") for key, t in about},
                }
            )
    return out


def no_action_means_no_change(ctx: CheckContext) -> list[dict[str, Any]]:
    """policy-applied-no-action on a ticket whose booking the session modified."""
    modified: set[str] = set()
    for change, refs in _session_bookings(ctx):
        if _is_modification(change):
            modified |= refs
    out = []
    for key, ticket in _resolved(ctx):
        if ticket.get("resolution_action") != "policy-applied-no-action":
            continue
        hit = sorted(_ticket_refs(ctx, ticket) & modified)
        if hit:
            out.append({"ticket_id": key, "resolution_action": "policy-applied-no-action", "modified": hit})
    return out


def escalated_on_hold(ctx: CheckContext) -> list[dict[str, Any]]:
    """The customer ticket of an escalation the session created waits on hold for the hotel."""
    agent = [(c.key, c.after) for c in _agent_tickets(ctx) if c.after is not None]
    out = []
    for tracking in _tracking_tickets(ctx):
        booking = _booking(ctx, tracking.get("booking_reference"))
        refs = {str(tracking.get("booking_reference"))}
        if booking is not None:
            refs |= _unit(ctx, booking)[1]
        for key, ticket in agent:
            if ticket.get("escalation_reason") != tracking.get("escalation_reason"):
                continue
            if not _ticket_refs(ctx, ticket) & refs:
                continue
            if ticket.get("status") != "hold":
                out.append(
                    {
                        "ticket_id": key,
                        "escalation_reason": ticket.get("escalation_reason"),
                        "status": ticket.get("status"),
                    }
                )
    return out


def task_type_for_actions(ctx: CheckContext) -> list[dict[str, Any]]:
    """A booking changed, or a refund or charge processed, is an action item: its ticket is a task."""
    acted: dict[str, set[str]] = {}
    for change, refs in _session_bookings(ctx):
        if _is_modification(change) or _is_cancellation(change):
            acted[str((change.before or {}).get("booking_reference"))] = refs
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") in ("charge", "refund"):
            ref = str(txn.get("booking_reference"))
            booking = _booking(ctx, ref)
            acted[ref] = _unit(ctx, booking)[1] if booking is not None else {ref}
    out = []
    for ref, refs in acted.items():
        about = _tickets_about(ctx, refs)
        if about and not any(t.get("type") == "task" for _, t in about):
            out.append({"booking_reference": ref, "tickets": {key: t.get("type") for key, t in about}})
    return out


def refund_full_only_for_whole_booking(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        if (
            ticket.get("resolution_action") != "refund-full"
            or ticket.get("escalation_reason") == "system-error"
        ):
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is not None and booking.get("booking_status") in ("confirmed", "checked_in"):
            out.append(
                {
                    "ticket_id": key,
                    "booking_reference": booking["booking_reference"],
                    "booking_status": booking["booking_status"],
                }
            )
    return out


def missing_booking_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        ref = ticket.get("booking_reference")
        if not ref or _booking(ctx, ref) is not None:
            continue
        allowed = {"low", "urgent"} if "hotel-partner" in {t.lower() for t in _tags(ticket)} else {"low"}
        if ticket.get("priority") not in allowed:
            out.append({"ticket_id": key, "booking_reference": ref, "priority": ticket.get("priority")})
    return out


def check_in_tag_needs_upcoming_booking(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        timing = [t for t in _tags(ticket) if t.lower() in CHECK_IN_TAGS]
        if not timing:
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        status = None if booking is None else booking.get("booking_status")
        if booking is None or status in ("checked_in", "checked_out"):
            out.append(
                {
                    "ticket_id": key,
                    "booking_reference": ticket.get("booking_reference"),
                    "booking_status": status,
                    "tags": timing,
                }
            )
    return out


def tickets_one_requester(ctx: CheckContext) -> list[dict[str, Any]]:
    """The tickets the session wrote are its requester's: one requester across all of them."""
    requesters: dict[str, list[str]] = {}
    for change in _agent_tickets(ctx):
        requester = (change.after or {}).get("requester_id")
        if requester is not None:
            requesters.setdefault(str(requester), []).append(change.key)
    if len(requesters) <= 1:
        return []
    return [{"requester_id": r, "tickets": keys} for r, keys in sorted(requesters.items())]
