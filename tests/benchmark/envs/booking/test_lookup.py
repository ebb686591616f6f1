"""Lookup tools on a real Environment (SQLite in memory).

The patch adds rows to the live tables (the reference lookups read those, not the ``lookup_*``
copies): two corporate accounts, two Boston hotels, a group GRP-T1 with member booking BKG-10000001,
and a booking BKG-10000002 outside any group.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.envs.booking import lookup
from benchmark.envs.booking.common import BOOKINGS, CORPORATE_ACCOUNTS, GROUP_BOOKINGS, HOTELS
from tests.support.booking import STAMP, booking, hotel
from tests.support.envs import Patch, call, failure, records

ACCOUNT = {
    "id": "INT-T1",
    "corporate_account_id": "CRP-T1",
    "company_name": "Zephyr Widgets Ltd",
    "account_tier": "mid_market",
    "account_status": "active",
    "contact_name": "Ann Ray",
    "contact_email": "ann@zephyrwidgets.example",
    "contact_phone": "+1-555-000-0001",
    "booking_limit": 50,
    "credit_limit": "25000.00",
    "payment_terms": "net_30",
    "created_at": STAMP,
    "updated_at": STAMP,
}
HOTEL = hotel(
    "HTL-ROW1",
    "HTL-T1",
    hotel_name="Quayside Harbor Hotel",
    contact_name="Desk",
    contact_email="desk@quayside.example",
)
BOOKING = booking("BKG-ROW1", "BKG-10000001", group_booking_id="GRP-T1", created_at=STAMP, updated_at=STAMP)
PATCH: dict[str, list[dict[str, Any]]] = {
    CORPORATE_ACCOUNTS: [
        ACCOUNT,
        {
            **ACCOUNT,
            "id": "INT-T2",
            "corporate_account_id": "CRP-T2",
            "company_name": "Quokka Travel",
            "account_tier": "enterprise",
            "contact_email": "ops@quokka.example",
        },
    ],
    HOTELS: [HOTEL, {**HOTEL, "id": "HTL-ROW2", "hotel_id": "HTL-T2", "hotel_name": "Back Bay Suites"}],
    BOOKINGS: [
        BOOKING,
        {**BOOKING, "id": "BKG-ROW2", "booking_reference": "BKG-10000002", "group_booking_id": None},
    ],
    GROUP_BOOKINGS: [
        {
            "id": "GRP-ROW1",
            "group_booking_id": "GRP-T1",
            "coordinator_name": "Dana Lee",
            "coordinator_email": "Dana@Events.example",
            "coordinator_phone": "+1-617-111-1111",
            "total_rooms": 7,
            "check_in_date": "2025-12-01T15:00:00Z",
            "check_out_date": "2025-12-03T11:00:00Z",
            "hotel_id": "HTL-T1",
            "booking_references": ["BKG-10000001"],
            "created_at": STAMP,
            "updated_at": STAMP,
        }
    ],
}


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def test_all_lookup_tools_are_read_only(domain: Domain) -> None:
    assert set(lookup.TOOLS) == lookup.READ_ONLY
    assert not any(domain.tools[name].writes for name in lookup.TOOLS)


def test_lookup_corporate_account_by_name_then_email_domain(env: Environment) -> None:
    tool = "lookup_lookup_corporate_account_id"
    assert call(env, tool, {"company_name": "zephyr"}) == {
        "corporate_account_id": "CRP-T1",
        "company_name": "Zephyr Widgets Ltd",
        "account_tier": "mid_market",
    }
    by_email = call(env, tool, {"customer_email": "someone@QUOKKA.example"})
    assert by_email["corporate_account_id"] == "CRP-T2" and by_email["account_tier"] == "enterprise"
    name_first = call(env, tool, {"company_name": "Zephyr", "customer_email": "x@quokka.example"})
    assert name_first["corporate_account_id"] == "CRP-T1"


def test_lookup_corporate_account_errors(env: Environment) -> None:
    tool = "lookup_lookup_corporate_account_id"
    assert call(env, tool, {}) == failure(tool, "Invalid parameters: provide company_name or customer_email.")
    assert call(env, tool, {"customer_email": "no-at-sign"}) == failure(tool, "Invalid email format.")
    assert call(env, tool, {"company_name": "Nonesuch"}) == failure(
        tool, "No corporate account found matching criteria."
    )


def test_lookup_group_booking_by_reference_or_coordinator(env: Environment) -> None:
    tool = "lookup_lookup_group_booking_id"
    expected = {
        "group_booking_id": "GRP-T1",
        "total_rooms": 7,
        "coordinator_contact": "Dana Lee <Dana@Events.example>",
    }
    assert call(env, tool, {"booking_reference": "BKG-10000001"}) == expected
    assert (
        call(env, tool, {"booking_reference": "BKG-10000002", "coordinator_email": "dana@events.EXAMPLE"})
        == expected
    )
    assert call(env, tool, {"booking_reference": "BKG-10000002"}) == failure(
        tool, "No group booking found matching criteria or booking is not part of a group."
    )
    assert call(env, tool, {"coordinator_email": ""}) == failure(
        tool, "Invalid parameters: provide booking_reference or coordinator_email."
    )


def test_lookup_hotel_by_name_or_location(env: Environment) -> None:
    tool = "lookup_lookup_hotel_id"
    assert call(env, tool, {"hotel_name": "quayside"}) == {
        "results": [{"hotel_id": "HTL-T1", "hotel_name": "Quayside Harbor Hotel", "location": "Boston"}]
    }
    both = call(env, tool, {"hotel_name": "nothing-like-this", "location": "BOSTON"})["results"]
    assert [h["hotel_id"] for h in both] == ["HTL-T1", "HTL-T2"]
    assert call(env, tool, {"location": "Atlantis"}) == failure(tool, "No hotels found matching criteria.")
    assert call(env, tool, {}) == failure(tool, "Invalid parameters: provide hotel_name or location.")


def test_validate_booking_reference(env: Environment) -> None:
    tool = "lookup_validate_booking_reference"
    assert env.call_tool(tool, {"booking_reference": "BKG-10000002"}) == json.dumps(
        {"is_valid": True, "booking_id": "BKG-ROW2"}
    )
    assert env.call_tool(tool, {"booking_reference": "BKG-99999999"}) == json.dumps({"is_valid": False})
    assert call(env, tool, {"booking_reference": "BKG-123"}) == failure(
        tool, "Invalid booking reference format."
    )
    lookup_copy = records(env, "lookup_bookings")[0]["booking_reference"]
    assert call(env, tool, {"booking_reference": lookup_copy}) == {"is_valid": False}
