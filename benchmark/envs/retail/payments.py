"""Payments (stripe) tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def charge_customer(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("charge_customer: not implemented yet")


def create_refund(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("create_refund: not implemented yet")


def get_payment_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_payment_status: not implemented yet")


TOOLS = {
    "charge_customer": charge_customer,
    "create_refund": create_refund,
    "get_payment_status": get_payment_status,
}

READ_ONLY: frozenset[str] = frozenset()
