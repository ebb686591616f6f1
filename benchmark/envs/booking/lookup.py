"""Lookup tools over the read-only lookup_* copies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def lookup_lookup_corporate_account_id(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("lookup_lookup_corporate_account_id: not implemented yet")


def lookup_lookup_group_booking_id(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("lookup_lookup_group_booking_id: not implemented yet")


def lookup_lookup_hotel_id(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("lookup_lookup_hotel_id: not implemented yet")


def lookup_validate_booking_reference(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("lookup_validate_booking_reference: not implemented yet")


TOOLS = {
    "lookup_lookup_corporate_account_id": lookup_lookup_corporate_account_id,
    "lookup_lookup_group_booking_id": lookup_lookup_group_booking_id,
    "lookup_lookup_hotel_id": lookup_lookup_hotel_id,
    "lookup_validate_booking_reference": lookup_validate_booking_reference,
}

READ_ONLY: frozenset[str] = frozenset()
