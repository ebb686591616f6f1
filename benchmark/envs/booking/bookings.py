"""Booking API (bookings, group bookings, availability) tools.

The reference looks rows up by linear scan (first match in store order) and mutates the stored
instances, so a computed ``booking_value`` sticks even when no field "changed" (see ``modify_booking``).
Availability and prices come from ``booking_api_hotel_inventory``: one row per hotel, room type, board
type and night, compared on calendar dates (check-out night excluded).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from benchmark.envs.booking.common import (
    BOOKINGS,
    GROUP_BOOKINGS,
    HOTELS,
    INVENTORY,
    MODIFY_TIME,
    money,
    parse_iso,
    value,
)
from benchmark.envs.booking.inputs import (
    BookingApiCheckHotelAvailabilityInput,
    BookingApiGetBookingHistoryInput,
    BookingApiGetBookingInput,
    BookingApiGetGroupBookingInput,
    BookingApiModifyBookingInput,
    BookingApiModifyGroupBookingInput,
    BookingApiSearchHotelsByLocationInput,
)
from benchmark.envs.booking.rows import Booking, GroupBooking, HotelInventory
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import Record
from benchmark.envs.tools import ToolFn


def _json(record: Record) -> dict[str, Any]:
    """A stored row as the reference returns it in a plain ``dict`` field (nulls kept)."""
    return record.model_dump(mode="json")


def _stay(check_in: str, check_out: str) -> tuple[dt.date, dt.date]:
    """Calendar dates of a stay; bad input reads as the reference's "Invalid date format" error."""
    try:
        return parse_iso(check_in).date(), parse_iso(check_out).date()
    except ValueError as exc:
        raise ToolError(f"Invalid date format: {exc}") from None


def _nights(
    env: Environment, hotel_id: str, room_type: str, first: dt.date, end: dt.date
) -> list[HotelInventory]:
    """Inventory rows of the hotel and room type whose night falls in [first, end)."""
    return [
        inv
        for inv in env.table(INVENTORY).where(hotel_id=hotel_id, room_type=room_type)
        if first <= parse_iso(inv.date).date() < end
    ]


def stay_value(
    env: Environment, hotel_id: str, check_in: str, check_out: str, room_type: Any, board_type: Any
) -> Decimal | None:
    """Sum of the nightly prices for the stay, or None when dates do not parse or no night is priced."""
    try:
        first, end = parse_iso(check_in).date(), parse_iso(check_out).date()
    except ValueError:
        return None
    total = Decimal("0")
    nights = 0
    for inv in env.table(INVENTORY).where(
        hotel_id=hotel_id, room_type=value(room_type), board_type=value(board_type)
    ):
        try:
            night = parse_iso(inv.date).date()
        except ValueError:
            continue
        if first <= night < end:
            total += Decimal(str(inv.price_per_night))
            nights += 1
    return money(total) if nights else None


def _find_booking(env: Environment, reference: str) -> Booking:
    matches = env.table(BOOKINGS).where(booking_reference=reference)
    if not matches:
        raise ToolError(f"Booking not found with booking_reference '{reference}'")
    return matches[0]


def _find_group(env: Environment, group_booking_id: str) -> GroupBooking:
    matches = env.table(GROUP_BOOKINGS).where(group_booking_id=group_booking_id)
    if not matches:
        raise ToolError(f"Group booking not found with group_booking_id '{group_booking_id}'")
    return matches[0]


def booking_api_check_hotel_availability(
    env: Environment, args: BookingApiCheckHotelAvailabilityInput
) -> dict[str, Any]:
    """Minimum free rooms over the stay for the board type, plus the board types free on some night.

    The hotel is looked up by the row id (not ``hotel_id``), as the reference's ``get_by_id`` does.
    """
    if env.table(HOTELS).get(args.hotel_id) is None:
        raise ToolError(f"Hotel not found with hotel_id '{args.hotel_id}'")
    first, end = _stay(args.check_in_date, args.check_out_date)
    if first >= end:
        raise ToolError("Check-in date must be before check-out date")
    room_inventory = env.table(INVENTORY).where(hotel_id=args.hotel_id, room_type=value(args.room_type))
    if not room_inventory:
        return {"available_count": 0, "available_board_types": [], "price_per_night": "0.00"}
    in_stay = [inv for inv in room_inventory if first <= parse_iso(inv.date).date() < end]
    same_board = [inv for inv in in_stay if value(inv.board_type) == value(args.board_type)]
    if same_board:
        available = min(inv.available_count for inv in same_board)
        price = str(money(same_board[0].price_per_night))
    else:
        available, price = 0, "0.00"
    boards = sorted({value(inv.board_type) for inv in in_stay if inv.available_count > 0})
    return {"available_count": available, "available_board_types": boards, "price_per_night": price}


def booking_api_get_booking(env: Environment, args: BookingApiGetBookingInput) -> dict[str, Any]:
    """First booking with the reference, else the customer's first booking."""
    if not args.booking_reference and not args.customer_id:
        raise ToolError("Either booking_reference or customer_id must be provided")
    if args.booking_reference:
        return {"booking_data": _json(_find_booking(env, args.booking_reference))}
    matches = env.table(BOOKINGS).where(customer_id=args.customer_id)
    if not matches:
        raise ToolError(f"Booking not found with customer_id '{args.customer_id}'")
    return {"booking_data": _json(matches[0])}


def booking_api_get_booking_history(
    env: Environment, args: BookingApiGetBookingHistoryInput
) -> dict[str, Any]:
    """The customer's bookings, newest ``created_at`` (as text) first; none is not an error."""
    rows = env.table(BOOKINGS).where(customer_id=args.customer_id)
    rows = sorted(rows, key=lambda b: b.created_at, reverse=True)
    return {"bookings": [_json(b) for b in rows]}


def booking_api_get_group_booking(env: Environment, args: BookingApiGetGroupBookingInput) -> dict[str, Any]:
    return {"group_booking_data": _json(_find_group(env, args.group_booking_id))}


_CHANGEABLE = ("check_in_date", "check_out_date", "room_type", "board_type", "adults_count", "children_count")
_PRICED = ("check_in_date", "check_out_date", "room_type", "board_type")


def booking_api_modify_booking(env: Environment, args: BookingApiModifyBookingInput) -> dict[str, Any]:
    """Apply the given fields to a confirmed booking and re-price it from inventory.

    Re-pricing runs whenever a priced field is given (changed or not), and its value is kept even
    when nothing else changed: the reference assigns it on the stored instance without a history entry.
    """
    table = env.table(BOOKINGS)
    booking = _find_booking(env, args.booking_reference)
    status = value(booking.booking_status)
    if status != "confirmed":
        raise ToolError(f"Booking cannot be modified. Current status is '{status}', must be 'confirmed'")
    original = booking.model_dump()
    changes: dict[str, Any] = {}
    notes: list[str] = []
    for name in _CHANGEABLE:
        new = getattr(args, name)
        if new is None or value(original[name]) == value(new):
            continue
        changes[name] = value(new)
        notes.append(f"{name}: {value(original[name])} -> {value(new)}")
    if args.special_requests is not None and original["special_requests"] != args.special_requests:
        changes["special_requests"] = list(args.special_requests)
        notes.append("special_requests updated")
    if args.booking_status is not None and status != value(args.booking_status):
        changes["booking_status"] = value(args.booking_status)
        notes.append(f"booking_status: {status} -> {value(args.booking_status)}")
    updated = {**original, **changes}
    difference = Decimal("0")
    if any(getattr(args, name) is not None for name in _PRICED):
        new_value = stay_value(
            env,
            updated["hotel_id"],
            updated["check_in_date"],
            updated["check_out_date"],
            updated["room_type"],
            updated["board_type"],
        )
        if new_value is not None:
            difference = new_value - original["booking_value"]
            updated["booking_value"] = new_value
    if notes:
        updated["modification_history"] = [
            *original["modification_history"],
            f"{MODIFY_TIME}: " + "; ".join(notes),
        ]
        updated["updated_at"] = MODIFY_TIME
    record = table.record(updated)
    if record.model_dump(mode="json") != booking.model_dump(mode="json"):
        table.save(record)
    return {"updated_booking": _json(record), "price_difference": str(money(difference))}


def booking_api_modify_group_booking(
    env: Environment, args: BookingApiModifyGroupBookingInput
) -> dict[str, Any]:
    """Move a group's dates; with cascade, move each member booking (any status) and re-price it."""
    groups, bookings = env.table(GROUP_BOOKINGS), env.table(BOOKINGS)
    group = _find_group(env, args.group_booking_id)
    details = args.modification_details
    new_dates = {
        name: getattr(details, name) for name in ("check_in_date", "check_out_date") if getattr(details, name)
    }
    group_changes = {name: new for name, new in new_dates.items() if getattr(group, name) != new}
    modified: list[str] = []
    total = Decimal("0")
    if args.cascade_to_individual_bookings:
        for reference in group.booking_references:
            matches = bookings.where(booking_reference=reference)
            if not matches:
                continue
            booking = matches[0]
            changes = {name: new for name, new in new_dates.items() if getattr(booking, name) != new}
            if not changes:
                continue
            updated = {**booking.model_dump(), **changes}
            new_value = stay_value(
                env,
                booking.hotel_id,
                updated["check_in_date"],
                updated["check_out_date"],
                booking.room_type,
                booking.board_type,
            )
            if new_value is not None:
                difference = new_value - booking.booking_value
                total += difference
                if difference != 0:
                    updated["booking_value"] = new_value
            note = "; ".join(f"{name} updated via group booking {args.group_booking_id}" for name in changes)
            updated["modification_history"] = [*booking.modification_history, f"{MODIFY_TIME}: {note}"]
            updated["updated_at"] = MODIFY_TIME
            bookings.save(bookings.record(updated))
            modified.append(reference)
    if group_changes or modified:
        group = groups.record({**group.model_dump(), **group_changes, "updated_at": MODIFY_TIME})
        groups.save(group)
    return {
        "updated_group_booking": _json(group),
        "modified_booking_references": modified,
        "total_price_difference": str(money(total)),
    }


def booking_api_search_hotels_by_location(
    env: Environment, args: BookingApiSearchHotelsByLocationInput
) -> dict[str, Any]:
    """Hotels whose location contains the query (case-insensitive) with a free room every night.

    The price is the mean nightly price over the stay, rounded half-up to cents.
    """
    first, end = _stay(args.check_in_date, args.check_out_date)
    if first >= end:
        raise ToolError("Check-in date must be before check-out date")
    query = args.location.lower()
    results = []
    for hotel in env.table(HOTELS).all():
        if query not in hotel.location.lower():
            continue
        nights = [
            inv
            for inv in _nights(env, hotel.hotel_id, value(args.room_type), first, end)
            if value(inv.board_type) == value(args.board_type)
        ]
        if not nights:
            continue
        available = min(inv.available_count for inv in nights)
        if available <= 0:
            continue
        mean = sum((inv.price_per_night for inv in nights), Decimal("0")) / len(nights)
        results.append(
            {
                "hotel_id": hotel.hotel_id,
                "hotel_name": hotel.hotel_name,
                "location": hotel.location,
                "partner_tier": value(hotel.partner_tier),
                "available_count": available,
                "price_per_night": str(money(mean)),
            }
        )
    return {"hotels": results}


TOOLS: dict[str, ToolFn] = {
    "booking_api_check_hotel_availability": booking_api_check_hotel_availability,
    "booking_api_get_booking": booking_api_get_booking,
    "booking_api_get_booking_history": booking_api_get_booking_history,
    "booking_api_get_group_booking": booking_api_get_group_booking,
    "booking_api_modify_booking": booking_api_modify_booking,
    "booking_api_modify_group_booking": booking_api_modify_group_booking,
    "booking_api_search_hotels_by_location": booking_api_search_hotels_by_location,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "booking_api_check_hotel_availability",
        "booking_api_get_booking",
        "booking_api_get_booking_history",
        "booking_api_get_group_booking",
        "booking_api_search_hotels_by_location",
    }
)
