"""Hotel partner tools on a real Environment (SQLite in memory).

The patch adds hotel HTL-T1 (with an escalation contact) and HTL-T2 (without one, row id different
from its hotel_id), two priced nights for HTL-T1 and one sold-out night for HTL-T2, and booking
BKG-10000001 of customer CUS-T1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.envs.booking import hotels
from benchmark.envs.booking.common import BOOKINGS, HOTELS, INVENTORY, TICKETS
from tests.support.booking import STAMP, hotel, night
from tests.support.envs import Patch, call, failure

HOTEL = hotel(
    "HTL-T1",
    "HTL-T1",
    partner_tier="premium",
    contact_email="desk@harbor.example",
    escalation_contact="manager@harbor.example",
    amenities=["wifi", "gym"],
)


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def _night(row_id: str, hotel_id: str, date: str, count: int) -> dict[str, Any]:
    return night(
        row_id, hotel_id, date, count, room_type="suite", board_type="half_board", price_per_night="300.00"
    )


PATCH: dict[str, list[dict[str, Any]]] = {
    HOTELS: [
        HOTEL,
        {
            **HOTEL,
            "id": "HTL-ROW2",
            "hotel_id": "HTL-T2",
            "escalation_contact": None,
            "contact_email": "desk@small.example",
        },
    ],
    INVENTORY: [
        _night("INV-T1", "HTL-T1", "2025-12-01", 4),
        _night("INV-T2", "HTL-T1", "2025-12-02", 2),
        _night("INV-T3", "HTL-T2", "2025-12-01", 0),
    ],
    BOOKINGS: [
        {
            "id": "BKG-ROW1",
            "booking_reference": "BKG-10000001",
            "customer_id": "CUS-T1",
            "hotel_id": "HTL-T1",
            "check_in_date": "2025-12-01T15:00:00Z",
            "check_out_date": "2025-12-03T11:00:00Z",
            "booking_value": "600.00",
            "room_type": "suite",
            "board_type": "half_board",
            "adults_count": 2,
            "created_at": STAMP,
            "updated_at": STAMP,
        }
    ],
}


def stay(hotel_id: str, check_in: str, check_out: str) -> dict[str, Any]:
    return {
        "hotel_id": hotel_id,
        "check_in_date": check_in,
        "check_out_date": check_out,
        "room_type": "suite",
        "board_type": "half_board",
        "adults_count": 2,
        "children_count": 0,
    }


def escalation(hotel_id: str, reference: str = "BKG-10000001") -> dict[str, Any]:
    return {
        "hotel_id": hotel_id,
        "booking_reference": reference,
        "issue_type": "guest-complaint",
        "description": "Noise all night",
    }


def test_read_only_lists_exactly_the_tools_that_never_write(domain: Domain) -> None:
    assert set(hotels.TOOLS) - {"hotel_partner_api_escalate_to_hotel"} == hotels.READ_ONLY
    for name in hotels.TOOLS:
        assert domain.tools[name].writes == (name not in hotels.READ_ONLY)


def test_escalate_creates_numbered_open_incident_tickets(env: Environment) -> None:
    tool = "hotel_partner_api_escalate_to_hotel"
    tickets = env.table(TICKETS)
    before = tickets.count()
    assert call(env, tool, escalation("HTL-T1")) == {
        "escalation_ticket_id": "ZDSK-00000001",
        "hotel_contact_email": "manager@harbor.example",
        "hotel_contact_phone": "+1-617-000-0000",
    }
    second = call(env, tool, escalation("HTL-T2"))
    assert second["escalation_ticket_id"] == "ZDSK-00000002"
    assert second["hotel_contact_email"] == "desk@small.example"
    assert tickets.count() == before + 2
    ticket = tickets.get("ZDSK-00000001")
    assert ticket is not None
    stored = ticket.model_dump(mode="json")
    assert {
        k: stored[k] for k in ("subject", "description", "status", "priority", "type", "requester_id")
    } == {
        "subject": "Hotel Escalation: guest-complaint",
        "description": "Noise all night",
        "status": "open",
        "priority": "high",
        "type": "incident",
        "requester_id": "CUS-T1",
    }
    assert stored["escalation_reason"] == "guest-complaint" and stored["hotel_id"] == "HTL-T1"
    assert stored["created_at"] == stored["updated_at"] == "2025-11-30T10:00:00Z" and stored["tags"] == []


def test_escalate_errors_write_nothing(env: Environment) -> None:
    tool = "hotel_partner_api_escalate_to_hotel"
    before = env.state_hash()
    assert call(env, tool, escalation("HTL-ROW2")) == failure(tool, "Hotel 'HTL-ROW2' not found.")
    assert call(env, tool, escalation("HTL-T1", "BKG-NOPE")) == failure(tool, "Booking 'BKG-NOPE' not found.")
    assert call(env, tool, {**escalation("HTL-T1"), "issue_type": "other"})["error"].startswith(
        "Tool execution failed: Input validation failed: issue_type: Input should be"
    )
    assert env.state_hash() == before


def test_get_hotel_contact_omits_missing_escalation_contact(env: Environment) -> None:
    tool = "hotel_partner_api_get_hotel_contact"
    assert call(env, tool, {"hotel_id": "HTL-T1"})["escalation_contact"] == "manager@harbor.example"
    assert env.call_tool(tool, {"hotel_id": "HTL-T2"}) == json.dumps(
        {
            "contact_name": "Front Desk",
            "contact_email": "desk@small.example",
            "contact_phone": "+1-617-000-0000",
        }
    )
    assert call(env, tool, {"hotel_id": "HTL-ROW2"}) == failure(tool, "Hotel not found: HTL-ROW2")


def test_get_hotel_info_returns_the_record_without_nulls(env: Environment) -> None:
    tool = "hotel_partner_api_get_hotel_info"
    info = call(env, tool, {"hotel_id": "HTL-T1"})["hotel_data"]
    assert list(info) == [
        *("id", "hotel_id", "hotel_name", "location", "partner_tier"),
        *("contact_name", "contact_email", "contact_phone", "escalation_contact", "amenities"),
        *("supports_pets", "accessible_rooms_available", "created_at", "updated_at"),
    ]
    assert info["amenities"] == ["wifi", "gym"] and info["supports_pets"] is False
    assert "escalation_contact" not in call(env, tool, {"hotel_id": "HTL-T2"})["hotel_data"]
    assert call(env, tool, {"hotel_id": "HTL-NOPE"}) == failure(tool, "Hotel not found: HTL-NOPE")


def test_verify_availability_counts_nights_in_range(env: Environment) -> None:
    tool = "hotel_partner_api_verify_availability"
    assert call(env, tool, stay("HTL-T1", "2025-12-01T15:00:00Z", "2025-12-03T11:00:00Z")) == {
        "availability_confirmed": True,
        "confirmation_notes": "Confirmed availability for 2 nights. Minimum 2 rooms available.",
    }
    assert call(env, tool, stay("HTL-T2", "2025-12-01", "2025-12-02")) == {
        "availability_confirmed": False,
        "confirmation_notes": "No availability for requested dates.",
    }
    assert call(env, tool, stay("HTL-T1", "2026-01-01", "2026-01-02")) == {
        "availability_confirmed": False,
        "confirmation_notes": "No inventory data available for this hotel/room combination.",
    }
    assert call(env, tool, stay("HTL-NOPE", "2025-12-01", "2025-12-02")) == failure(
        tool, "Hotel not found: HTL-NOPE"
    )
