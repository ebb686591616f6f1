"""Booking API (bookings, group bookings, availability) tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def booking_api_check_hotel_availability(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_check_hotel_availability: not implemented yet")


def booking_api_get_booking(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_get_booking: not implemented yet")


def booking_api_get_booking_history(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_get_booking_history: not implemented yet")


def booking_api_get_group_booking(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_get_group_booking: not implemented yet")


def booking_api_modify_booking(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_modify_booking: not implemented yet")


def booking_api_modify_group_booking(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_modify_group_booking: not implemented yet")


def booking_api_search_hotels_by_location(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("booking_api_search_hotels_by_location: not implemented yet")


TOOLS = {
    "booking_api_check_hotel_availability": booking_api_check_hotel_availability,
    "booking_api_get_booking": booking_api_get_booking,
    "booking_api_get_booking_history": booking_api_get_booking_history,
    "booking_api_get_group_booking": booking_api_get_group_booking,
    "booking_api_modify_booking": booking_api_modify_booking,
    "booking_api_modify_group_booking": booking_api_modify_group_booking,
    "booking_api_search_hotels_by_location": booking_api_search_hotels_by_location,
}

READ_ONLY: frozenset[str] = frozenset()
