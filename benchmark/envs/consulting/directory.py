"""Catalogue, CRM, directory, access, approval and procurement tools (single-purpose)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def software_catalog_get_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("software_catalog_get_details: not implemented yet")


def software_catalog_search(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("software_catalog_search: not implemented yet")


def salesforce_crm_check_employee_assignment(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("salesforce_crm_check_employee_assignment: not implemented yet")


def salesforce_crm_get_engagement(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("salesforce_crm_get_engagement: not implemented yet")


def workday_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("workday_api: not implemented yet")


def okta_provision_access(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("okta_provision_access: not implemented yet")


def mavenlink_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("mavenlink_api: not implemented yet")


def approval_create_request(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approval_create_request: not implemented yet")


def approval_get_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approval_get_status: not implemented yet")


def approver_lookup_get_contact(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approver_lookup_get_contact: not implemented yet")


def hardware_procurement_create_order(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("hardware_procurement_create_order: not implemented yet")


TOOLS = {
    "software_catalog_get_details": software_catalog_get_details,
    "software_catalog_search": software_catalog_search,
    "salesforce_crm_check_employee_assignment": salesforce_crm_check_employee_assignment,
    "salesforce_crm_get_engagement": salesforce_crm_get_engagement,
    "workday_api": workday_api,
    "okta_provision_access": okta_provision_access,
    "mavenlink_api": mavenlink_api,
    "approval_create_request": approval_create_request,
    "approval_get_status": approval_get_status,
    "approver_lookup_get_contact": approver_lookup_get_contact,
    "hardware_procurement_create_order": hardware_procurement_create_order,
}

READ_ONLY: frozenset[str] = frozenset()
