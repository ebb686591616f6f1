"""Payments (post-stay amounts, card tokens, invoice types) and, at commit, the money that must follow
from what the session changed (modification charges, cancellation refunds).
"""

from __future__ import annotations

import re
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

from .lookups import (
    BASE_FEES,
    BOOKINGS,
    COMPENSATION_PERCENTAGES,
    GROUPS,
    MODIFICATION_FIELDS,
    SERVICE_FEE,
    SPECIAL_FEES,
    TIER_MULTIPLIER,
    TIER_REFUND_PERCENTAGES,
    TOLERANCE,
    TRANSACTIONS,
    _active_tier,
    _booking,
    _changed,
    _fits,
    _inserted,
    _is_cancellation,
    _is_modification,
    _list,
    _money,
    _nights,
    _norm_reason,
    _session_money,
    _sums,
    _tier,
    _unit,
    _updates,
    _vip_tier,
)


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
