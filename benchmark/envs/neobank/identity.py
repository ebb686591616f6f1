"""Identity and access tools: Okta groups/apps, Okta security actions, Workday directory, incident verification."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def okta_api_add_to_group(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_api_add_to_group: not implemented yet")


def okta_api_check_access(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_api_check_access: not implemented yet")


def okta_api_get_user_groups(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_api_get_user_groups: not implemented yet")


def okta_api_provision_access(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_api_provision_access: not implemented yet")


def okta_api_revoke_access(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_api_revoke_access: not implemented yet")


def okta_security_api_execute_action(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_security_api_execute_action: not implemented yet")


def workday_api_get_employee(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("workday_api_get_employee: not implemented yet")


def workday_api_get_manager_chain(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("workday_api_get_manager_chain: not implemented yet")


def workday_api_get_org_structure(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("workday_api_get_org_structure: not implemented yet")


def security_api_verify_incident(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("security_api_verify_incident: not implemented yet")


TOOLS = {
    "okta_api_add_to_group": okta_api_add_to_group,
    "okta_api_check_access": okta_api_check_access,
    "okta_api_get_user_groups": okta_api_get_user_groups,
    "okta_api_provision_access": okta_api_provision_access,
    "okta_api_revoke_access": okta_api_revoke_access,
    "okta_security_api_execute_action": okta_security_api_execute_action,
    "workday_api_get_employee": workday_api_get_employee,
    "workday_api_get_manager_chain": workday_api_get_manager_chain,
    "workday_api_get_org_structure": workday_api_get_org_structure,
    "security_api_verify_incident": security_api_verify_incident,
}

READ_ONLY: frozenset[str] = frozenset()
