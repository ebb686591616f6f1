"""Customer CRM tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def crm_get_customer_by_email(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_get_customer_by_email: not implemented yet")


def crm_get_customer_profile(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_get_customer_profile: not implemented yet")


def crm_verify_identity(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_verify_identity: not implemented yet")


TOOLS = {
    "crm_get_customer_by_email": crm_get_customer_by_email,
    "crm_get_customer_profile": crm_get_customer_profile,
    "crm_verify_identity": crm_verify_identity,
}

READ_ONLY: frozenset[str] = frozenset()
