"""Hotel partner API tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def hotel_partner_api_escalate_to_hotel(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("hotel_partner_api_escalate_to_hotel: not implemented yet")


def hotel_partner_api_get_hotel_contact(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("hotel_partner_api_get_hotel_contact: not implemented yet")


def hotel_partner_api_get_hotel_info(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("hotel_partner_api_get_hotel_info: not implemented yet")


def hotel_partner_api_verify_availability(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("hotel_partner_api_verify_availability: not implemented yet")


TOOLS = {
    "hotel_partner_api_escalate_to_hotel": hotel_partner_api_escalate_to_hotel,
    "hotel_partner_api_get_hotel_contact": hotel_partner_api_get_hotel_contact,
    "hotel_partner_api_get_hotel_info": hotel_partner_api_get_hotel_info,
    "hotel_partner_api_verify_availability": hotel_partner_api_verify_availability,
}

READ_ONLY: frozenset[str] = frozenset()
