"""Hotel partner API tools: hotel details, contacts, availability confirmation and escalation.

Hotels are found by their ``hotel_id`` field (first match in store order), not by the row id.
"""

from __future__ import annotations

from typing import Any

from benchmark.envs.booking.common import BOOKINGS, ESCALATE_TIME, HOTELS, INVENTORY, TICKETS, value
from benchmark.envs.booking.inputs import (
    HotelPartnerApiEscalateToHotelInput,
    HotelPartnerApiGetHotelContactInput,
    HotelPartnerApiGetHotelInfoInput,
    HotelPartnerApiVerifyAvailabilityInput,
)
from benchmark.envs.booking.rows import Hotel, Ticket
from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.tools import ToolFn

TICKET_ID = "ZDSK-{:08d}"

_HOTEL_FIELDS = (
    "id",
    "hotel_id",
    "hotel_name",
    "location",
    "partner_tier",
    "contact_name",
    "contact_email",
    "contact_phone",
    "escalation_contact",
    "amenities",
    "supports_pets",
    "accessible_rooms_available",
    "created_at",
    "updated_at",
)


def _hotel(env: Environment, hotel_id: str) -> Hotel | None:
    matches = env.table(HOTELS).where(hotel_id=hotel_id)
    return matches[0] if matches else None


def _known_hotel(env: Environment, hotel_id: str) -> Hotel:
    hotel = _hotel(env, hotel_id)
    if hotel is None:
        raise ToolError(f"Hotel not found: {hotel_id}")
    return hotel


def _free_ticket_id(tickets: Table[Ticket]) -> str:
    """``ZDSK-`` with the smallest 8-digit counter from 1 that no ticket uses."""
    taken = {row.id for row in tickets.all()}
    counter = 1
    while TICKET_ID.format(counter) in taken:
        counter += 1
    return TICKET_ID.format(counter)


def hotel_partner_api_escalate_to_hotel(
    env: Environment, args: HotelPartnerApiEscalateToHotelInput
) -> dict[str, Any]:
    """Open a high-priority incident ticket for the hotel; reply with its escalation contact."""
    hotel = _hotel(env, args.hotel_id)
    if hotel is None:
        raise ToolError(f"Hotel '{args.hotel_id}' not found.")
    bookings = env.table(BOOKINGS).where(booking_reference=args.booking_reference)
    if not bookings:
        raise ToolError(f"Booking '{args.booking_reference}' not found.")
    tickets = env.table(TICKETS)
    ticket_id = _free_ticket_id(tickets)
    issue = value(args.issue_type)
    tickets.create(
        tickets.record(
            {
                "id": ticket_id,
                "subject": f"Hotel Escalation: {issue}",
                "description": args.description,
                "status": "open",
                "priority": "high",
                "type": "incident",
                "created_at": ESCALATE_TIME,
                "updated_at": ESCALATE_TIME,
                "requester_id": bookings[0].customer_id,
                "hotel_id": args.hotel_id,
                "booking_reference": args.booking_reference,
                "escalation_reason": issue,
            }
        )
    )
    return {
        "escalation_ticket_id": ticket_id,
        "hotel_contact_email": hotel.escalation_contact or hotel.contact_email,
        "hotel_contact_phone": hotel.contact_phone,
    }


def hotel_partner_api_get_hotel_contact(
    env: Environment, args: HotelPartnerApiGetHotelContactInput
) -> dict[str, Any]:
    hotel = _known_hotel(env, args.hotel_id)
    return {
        "contact_name": hotel.contact_name,
        "contact_email": hotel.contact_email,
        "contact_phone": hotel.contact_phone,
        "escalation_contact": hotel.escalation_contact,
    }


def hotel_partner_api_get_hotel_info(
    env: Environment, args: HotelPartnerApiGetHotelInfoInput
) -> dict[str, Any]:
    """The hotel record; ``hotel_data`` is a model in the reference, so its nulls are dropped too."""
    row = _known_hotel(env, args.hotel_id).model_dump(mode="json")
    return {"hotel_data": {name: row[name] for name in _HOTEL_FIELDS if row[name] is not None}}


def hotel_partner_api_verify_availability(
    env: Environment, args: HotelPartnerApiVerifyAvailabilityInput
) -> dict[str, Any]:
    """Confirm when every inventory night in range has a free room.

    Nights are compared as text: the date part of the inputs against the stored ``date`` strings.
    """
    _known_hotel(env, args.hotel_id)
    first = args.check_in_date.split("T")[0]
    end = args.check_out_date.split("T")[0]
    nights = [
        inv
        for inv in env.table(INVENTORY).where(
            hotel_id=args.hotel_id, room_type=value(args.room_type), board_type=value(args.board_type)
        )
        if first <= inv.date < end
    ]
    if not nights:
        return {
            "availability_confirmed": False,
            "confirmation_notes": "No inventory data available for this hotel/room combination.",
        }
    available = min(inv.available_count for inv in nights)
    if available > 0:
        notes = f"Confirmed availability for {len(nights)} nights. Minimum {available} rooms available."
    else:
        notes = "No availability for requested dates."
    return {"availability_confirmed": available > 0, "confirmation_notes": notes}


TOOLS: dict[str, ToolFn] = {
    "hotel_partner_api_escalate_to_hotel": hotel_partner_api_escalate_to_hotel,
    "hotel_partner_api_get_hotel_contact": hotel_partner_api_get_hotel_contact,
    "hotel_partner_api_get_hotel_info": hotel_partner_api_get_hotel_info,
    "hotel_partner_api_verify_availability": hotel_partner_api_verify_availability,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "hotel_partner_api_get_hotel_contact",
        "hotel_partner_api_get_hotel_info",
        "hotel_partner_api_verify_availability",
    }
)
