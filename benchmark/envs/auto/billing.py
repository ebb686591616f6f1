"""Billing account tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def billing_create_installment_plan(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("billing_create_installment_plan: not implemented yet")


def billing_get_account_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("billing_get_account_details: not implemented yet")


def billing_get_arrangement_history(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("billing_get_arrangement_history: not implemented yet")


def billing_grant_extension(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("billing_grant_extension: not implemented yet")


def billing_reset_account_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("billing_reset_account_status: not implemented yet")


TOOLS = {
    "billing_create_installment_plan": billing_create_installment_plan,
    "billing_get_account_details": billing_get_account_details,
    "billing_get_arrangement_history": billing_get_arrangement_history,
    "billing_grant_extension": billing_grant_extension,
    "billing_reset_account_status": billing_reset_account_status,
}

READ_ONLY: frozenset[str] = frozenset()
