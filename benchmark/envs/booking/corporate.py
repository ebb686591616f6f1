"""Corporate accounts API tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def corporate_api_generate_corporate_invoice(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("corporate_api_generate_corporate_invoice: not implemented yet")


def corporate_api_get_account_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("corporate_api_get_account_details: not implemented yet")


def corporate_api_get_corporate_booking_history(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("corporate_api_get_corporate_booking_history: not implemented yet")


def corporate_api_verify_account_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("corporate_api_verify_account_status: not implemented yet")


TOOLS = {
    "corporate_api_generate_corporate_invoice": corporate_api_generate_corporate_invoice,
    "corporate_api_get_account_details": corporate_api_get_account_details,
    "corporate_api_get_corporate_booking_history": corporate_api_get_corporate_booking_history,
    "corporate_api_verify_account_status": corporate_api_verify_account_status,
}

READ_ONLY: frozenset[str] = frozenset()
