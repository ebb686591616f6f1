"""Bookings: what a modification call did (after_call): group members, room capacity, inventory,
accessible rooms, pets, and the approvals a mid-market or a large group booking needs.
"""

from __future__ import annotations

import re
from typing import Any

from guard.checks import CheckContext

from .lookups import (
    BOOKINGS,
    GROUPS,
    PRICED_FIELDS,
    ROOM_CAPACITY,
    _active_tier,
    _changed,
    _day,
    _group,
    _hotel,
    _is_modification,
    _list,
    _money,
    _status,
    _tier,
    _updates,
)


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
