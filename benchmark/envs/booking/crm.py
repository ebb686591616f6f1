"""Customer CRM API tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def crm_api_check_vip_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_api_check_vip_status: not implemented yet")


def crm_api_get_customer_preferences(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_api_get_customer_preferences: not implemented yet")


def crm_api_get_customer_profile(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_api_get_customer_profile: not implemented yet")


def crm_api_update_customer_info(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("crm_api_update_customer_info: not implemented yet")


TOOLS = {
    "crm_api_check_vip_status": crm_api_check_vip_status,
    "crm_api_get_customer_preferences": crm_api_get_customer_preferences,
    "crm_api_get_customer_profile": crm_api_get_customer_profile,
    "crm_api_update_customer_info": crm_api_update_customer_info,
}

READ_ONLY: frozenset[str] = frozenset()
