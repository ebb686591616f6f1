"""Customer profile and membership (salesforce) and promotion (promo) tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def get_discount_application(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_discount_application: not implemented yet")


def get_promotion_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_promotion_details: not implemented yet")


def add_points_to_balance(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("add_points_to_balance: not implemented yet")


def get_customer_profile(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_customer_profile: not implemented yet")


def get_membership_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_membership_details: not implemented yet")


def update_membership_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("update_membership_status: not implemented yet")


TOOLS = {
    "get_discount_application": get_discount_application,
    "get_promotion_details": get_promotion_details,
    "add_points_to_balance": add_points_to_balance,
    "get_customer_profile": get_customer_profile,
    "get_membership_details": get_membership_details,
    "update_membership_status": update_membership_status,
}

READ_ONLY: frozenset[str] = frozenset()
