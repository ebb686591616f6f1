"""Booking API tools on a real Environment (SQLite in memory).

A small patch over the domain defaults: hotel HTL-T1 (row id = hotel_id) with three priced deluxe
nights in December, hotel HTL-T2 whose row id differs from its hotel_id, one confirmed and one
cancelled booking of customer CUS-T1, and group GRP-T1 with two member bookings.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.envs.booking import bookings
from benchmark.envs.booking.common import BOOKINGS, GROUP_BOOKINGS, HOTELS, INVENTORY
from tests.support.booking import STAMP, booking, hotel, night
from tests.support.envs import Patch, call, failure, stored


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def _hotel(row_id: str, hotel_id: str, name: str, tier: str) -> dict[str, Any]:
    return hotel(row_id, hotel_id, hotel_name=name, partner_tier=tier)


def _night(row_id: str, hotel_id: str, date: str, count: int, price: str, board: str) -> dict[str, Any]:
    return night(row_id, hotel_id, date, count, price_per_night=price, board_type=board)


PATCH: dict[str, list[dict[str, Any]]] = {
    HOTELS: [
        _hotel("HTL-T1", "HTL-T1", "Harbor Grand", "premium"),
        _hotel("HTL-ROW2", "HTL-T2", "Harbor Budget", "budget"),
    ],
    INVENTORY: [
        _night("INV-T1", "HTL-T1", "2025-12-01", 3, "200.00", "with_breakfast"),
        _night("INV-T2", "HTL-T1", "2025-12-02", 2, "180.00", "with_breakfast"),
        _night("INV-T3", "HTL-T1", "2025-12-03", 5, "220.00", "with_breakfast"),
        _night("INV-T4", "HTL-T1", "2025-12-01", 0, "250.00", "half_board"),
        _night("INV-T5", "HTL-T1", "2025-12-02", 4, "245.00", "full_board"),
        _night("INV-T6", "HTL-T2", "2025-12-01", 0, "100.00", "with_breakfast"),
    ],
    BOOKINGS: [
        booking("BKG-ROW1", "BKG-10000001"),
        booking("BKG-ROW2", "BKG-10000002", booking_status="cancelled", created_at="2025-09-10T10:00:00Z"),
        booking("BKG-ROW3", "BKG-10000003", customer_id="CUS-G1", group_booking_id="GRP-T1"),
        booking(
            "BKG-ROW4",
            "BKG-10000004",
            customer_id="CUS-G2",
            group_booking_id="GRP-T1",
            booking_status="checked_in",
            check_in_date="2025-12-02T15:00:00Z",
        ),
    ],
    GROUP_BOOKINGS: [
        {
            "id": "GRP-ROW1",
            "group_booking_id": "GRP-T1",
            "coordinator_name": "Dana Lee",
            "coordinator_email": "dana@example.com",
            "coordinator_phone": "+1-617-111-1111",
            "total_rooms": 3,
            "check_in_date": "2025-12-01T15:00:00Z",
            "check_out_date": "2025-12-03T11:00:00Z",
            "hotel_id": "HTL-T1",
            "booking_references": ["BKG-10000003", "BKG-10000004", "BKG-MISSING"],
            "created_at": STAMP,
            "updated_at": STAMP,
        }
    ],
}


def stay(hotel_id: str, check_in: str, check_out: str, board: str = "with_breakfast") -> dict[str, Any]:
    return {
        "hotel_id": hotel_id,
        "check_in_date": check_in,
        "check_out_date": check_out,
        "room_type": "deluxe_room",
        "board_type": board,
        "adults_count": 2,
        "children_count": 0,
    }


def test_read_only_lists_exactly_the_tools_that_never_write(domain: Domain) -> None:
    writers = {"booking_api_modify_booking", "booking_api_modify_group_booking"}
    assert set(bookings.TOOLS) - writers == bookings.READ_ONLY
    for name in bookings.TOOLS:
        assert domain.tools[name].writes == (name not in bookings.READ_ONLY)


def test_check_availability_takes_the_minimum_over_the_stay(env: Environment) -> None:
    tool = "booking_api_check_hotel_availability"
    text = env.call_tool(tool, stay("HTL-T1", "2025-12-01T15:00:00Z", "2025-12-03T11:00:00Z"))
    assert text == json.dumps(
        {
            "available_count": 2,
            "available_board_types": ["full_board", "with_breakfast"],
            "price_per_night": "200.00",
        }
    )
    half = call(env, tool, stay("HTL-T1", "2025-12-01", "2025-12-02", board="half_board"))
    assert half == {
        "available_count": 0,
        "available_board_types": ["with_breakfast"],
        "price_per_night": "250.00",
    }
    late = call(env, tool, stay("HTL-T1", "2026-01-01", "2026-01-02"))
    assert late == {"available_count": 0, "available_board_types": [], "price_per_night": "0.00"}


def test_check_availability_errors(env: Environment) -> None:
    tool = "booking_api_check_hotel_availability"
    assert call(env, tool, stay("HTL-T2", "2025-12-01", "2025-12-02")) == failure(
        tool, "Hotel not found with hotel_id 'HTL-T2'"
    )
    assert call(env, tool, stay("HTL-T1", "2025-12-02", "2025-12-02T23:00:00Z")) == failure(
        tool, "Check-in date must be before check-out date"
    )
    assert call(env, tool, stay("HTL-T1", "soon", "2025-12-02")) == failure(
        tool, "Invalid date format: Invalid isoformat string: 'soon'"
    )


def test_get_booking_by_reference_or_customer(env: Environment) -> None:
    tool = "booking_api_get_booking"
    by_ref = call(env, tool, {"booking_reference": "BKG-10000002"})["booking_data"]
    assert by_ref["id"] == "BKG-ROW2" and by_ref["booking_status"] == "cancelled"
    assert by_ref["booking_value"] == "380.00" and by_ref["corporate_account_id"] is None
    assert call(env, tool, {"customer_id": "CUS-T1"})["booking_data"]["id"] == "BKG-ROW1"
    assert call(env, tool, {"booking_reference": "", "customer_id": ""}) == failure(
        tool, "Either booking_reference or customer_id must be provided"
    )
    assert call(env, tool, {"booking_reference": "BKG-NOPE", "customer_id": "CUS-T1"}) == failure(
        tool, "Booking not found with booking_reference 'BKG-NOPE'"
    )
    assert call(env, tool, {"customer_id": "CUS-NOPE"}) == failure(
        tool, "Booking not found with customer_id 'CUS-NOPE'"
    )


def test_get_booking_history_is_newest_first(env: Environment) -> None:
    tool = "booking_api_get_booking_history"
    history = call(env, tool, {"customer_id": "CUS-T1"})["bookings"]
    assert [b["id"] for b in history] == ["BKG-ROW2", "BKG-ROW1"]
    assert call(env, tool, {"customer_id": "CUS-NOPE"}) == {"bookings": []}
    assert call(env, tool, {}) == failure(tool, "Input validation failed: customer_id: Field required")


def test_get_groupbooking(env: Environment) -> None:
    tool = "booking_api_get_group_booking"
    group = call(env, tool, {"group_booking_id": "GRP-T1"})["group_booking_data"]
    assert group["id"] == "GRP-ROW1" and group["total_rooms"] == 3
    assert call(env, tool, {"group_booking_id": "GRP-ROW1"}) == failure(
        tool, "Group booking not found with group_booking_id 'GRP-ROW1'"
    )


def test_modify_booking_records_history_and_reprices(env: Environment) -> None:
    tool = "booking_api_modify_booking"
    out = call(env, tool, {"booking_reference": "BKG-10000001", "check_out_date": "2025-12-04T11:00:00Z"})
    line = "2025-11-25T10:00:00Z: check_out_date: 2025-12-03T11:00:00Z -> 2025-12-04T11:00:00Z"
    assert out["price_difference"] == "220.00"
    saved = stored(env, BOOKINGS, "BKG-ROW1")
    assert out["updated_booking"] == saved
    assert saved["booking_value"] == "600.00" and saved["modification_history"] == [line]
    assert saved["updated_at"] == "2025-11-25T10:00:00Z"
    second = call(
        env, tool, {"booking_reference": "BKG-10000001", "adults_count": 3, "special_requests": ["crib"]}
    )
    assert second["price_difference"] == "0.00"
    assert stored(env, BOOKINGS, "BKG-ROW1")["modification_history"] == [
        line,
        "2025-11-25T10:00:00Z: adults_count: 2 -> 3; special_requests updated",
    ]


def test_modify_booking_without_priced_nights_keeps_value(env: Environment) -> None:
    out = call(
        env,
        "booking_api_modify_booking",
        {"booking_reference": "BKG-10000001", "room_type": "suite", "booking_status": "cancelled"},
    )
    assert out["price_difference"] == "0.00"
    saved = stored(env, BOOKINGS, "BKG-ROW1")
    assert saved["booking_value"] == "380.00" and saved["booking_status"] == "cancelled"
    assert saved["modification_history"] == [
        "2025-11-25T10:00:00Z: room_type: deluxe_room -> suite; booking_status: confirmed -> cancelled"
    ]


def test_modify_booking_no_op_writes_nothing(env: Environment) -> None:
    before = env.state_hash()
    out = call(env, "booking_api_modify_booking", {"booking_reference": "BKG-10000001", "adults_count": 2})
    assert out["updated_booking"]["modification_history"] == [] and out["price_difference"] == "0.00"
    assert env.state_hash() == before


def test_modify_booking_errors(env: Environment) -> None:
    tool = "booking_api_modify_booking"
    assert call(env, tool, {"booking_reference": "BKG-10000002", "adults_count": 1}) == failure(
        tool, "Booking cannot be modified. Current status is 'cancelled', must be 'confirmed'"
    )
    assert call(env, tool, {"booking_reference": "BKG-NOPE"}) == failure(
        tool, "Booking not found with booking_reference 'BKG-NOPE'"
    )
    assert call(env, tool, {"booking_reference": "BKG-10000001", "x": 1}) == failure(
        tool, "Input validation failed: x: Extra inputs are not permitted"
    )


def test_modify_group_booking_cascades_to_members(env: Environment) -> None:
    out = call(
        env,
        "booking_api_modify_group_booking",
        {
            "group_booking_id": "GRP-T1",
            "modification_details": {
                "check_in_date": "2025-12-02T15:00:00Z",
                "check_out_date": "2025-12-04T11:00:00Z",
            },
            "cascade_to_individual_bookings": True,
        },
    )
    assert out["modified_booking_references"] == ["BKG-10000003", "BKG-10000004"]
    assert out["total_price_difference"] == "40.00"
    group = stored(env, GROUP_BOOKINGS, "GRP-ROW1")
    assert out["updated_group_booking"] == group and group["updated_at"] == "2025-11-25T10:00:00Z"
    first, second = stored(env, BOOKINGS, "BKG-ROW3"), stored(env, BOOKINGS, "BKG-ROW4")
    assert first["booking_value"] == "400.00" and first["check_in_date"] == "2025-12-02T15:00:00Z"
    assert first["modification_history"] == [
        "2025-11-25T10:00:00Z: check_in_date updated via group booking GRP-T1; "
        "check_out_date updated via group booking GRP-T1"
    ]
    assert second["modification_history"] == [
        "2025-11-25T10:00:00Z: check_out_date updated via group booking GRP-T1"
    ]


def test_modify_group_booking_without_cascade_and_errors(env: Environment) -> None:
    tool = "booking_api_modify_group_booking"
    out = call(
        env,
        tool,
        {
            "group_booking_id": "GRP-T1",
            "modification_details": {"check_out_date": "2025-12-05T11:00:00Z"},
            "cascade_to_individual_bookings": False,
        },
    )
    assert out["modified_booking_references"] == [] and out["total_price_difference"] == "0.00"
    assert stored(env, GROUP_BOOKINGS, "GRP-ROW1")["check_out_date"] == "2025-12-05T11:00:00Z"
    assert stored(env, BOOKINGS, "BKG-ROW3")["check_out_date"] == "2025-12-03T11:00:00Z"
    assert call(
        env,
        tool,
        {"group_booking_id": "GRP-NOPE", "modification_details": {}, "cascade_to_individual_bookings": True},
    ) == failure(tool, "Group booking not found with group_booking_id 'GRP-NOPE'")


def test_search_hotels_by_location_averages_prices(env: Environment) -> None:
    tool = "booking_api_search_hotels_by_location"
    args = {**stay("", "2025-12-01T15:00:00Z", "2025-12-03T11:00:00Z"), "location": "bost"}
    del args["hotel_id"]
    assert call(env, tool, args) == {
        "hotels": [
            {
                "hotel_id": "HTL-T1",
                "hotel_name": "Harbor Grand",
                "location": "Boston",
                "partner_tier": "premium",
                "available_count": 2,
                "price_per_night": "190.00",
            }
        ]
    }
    assert call(env, tool, {**args, "location": "Atlantis"}) == {"hotels": []}
    assert call(env, tool, {**args, "check_out_date": "2025-12-01T18:00:00Z"}) == failure(
        tool, "Check-in date must be before check-out date"
    )
