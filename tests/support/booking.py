"""Rows of the booking domain (external_booking_v1) for tests' patches: a hotel, a priced night of its
inventory, a booking. Each takes its keys and overrides any other field; the defaults are a Boston
hotel, a deluxe room with breakfast, a two-night stay from 2025-12-01."""

from __future__ import annotations

from typing import Any

STAMP = "2025-01-01T10:00:00Z"
HOTEL = {
    "hotel_name": "Harbor Grand",
    "location": "Boston",
    "partner_tier": "standard",
    "contact_name": "Front Desk",
    "contact_phone": "+1-617-000-0000",
    "created_at": STAMP,
    "updated_at": STAMP,
}
NIGHT = {"room_type": "deluxe_room", "board_type": "with_breakfast", "created_at": STAMP, "updated_at": STAMP}
BOOKING = {
    "customer_id": "CUS-T1",
    "hotel_id": "HTL-T1",
    "check_in_date": "2025-12-01T15:00:00Z",
    "check_out_date": "2025-12-03T11:00:00Z",
    "booking_value": "380.00",
    "room_type": "deluxe_room",
    "board_type": "with_breakfast",
    "adults_count": 2,
    "created_at": "2025-09-01T10:00:00Z",
    "updated_at": "2025-09-01T10:00:00Z",
}


def hotel(row_id: str, hotel_id: str, **fields: Any) -> dict[str, Any]:
    email = f"desk@{hotel_id.lower()}.example"
    return {"id": row_id, "hotel_id": hotel_id, **HOTEL, "contact_email": email, **fields}


def night(row_id: str, hotel_id: str, date: str, count: int, **fields: Any) -> dict[str, Any]:
    keys = {"id": row_id, "hotel_id": hotel_id, "date": f"{date}T00:00:00Z", "available_count": count}
    return {**keys, **NIGHT, **fields}


def booking(row_id: str, reference: str, **fields: Any) -> dict[str, Any]:
    return {"id": row_id, "booking_reference": reference, **BOOKING, **fields}
