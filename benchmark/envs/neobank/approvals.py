"""Approval requests, approver lookup and e-mail notification tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def approval_api_check_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approval_api_check_status: not implemented yet")


def approval_api_create_request(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approval_api_create_request: not implemented yet")


def approver_lookup_api_get_contact_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approver_lookup_api_get_contact_details: not implemented yet")


def approver_lookup_api_get_approver_contact(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("approver_lookup_api_get_approver_contact: not implemented yet")


def email_notification_api_send_notification(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("email_notification_api_send_notification: not implemented yet")


TOOLS = {
    "approval_api_check_status": approval_api_check_status,
    "approval_api_create_request": approval_api_create_request,
    "approver_lookup_api_get_contact_details": approver_lookup_api_get_contact_details,
    "approver_lookup_api_get_approver_contact": approver_lookup_api_get_approver_contact,
    "email_notification_api_send_notification": email_notification_api_send_notification,
}

READ_ONLY: frozenset[str] = frozenset()
