"""Shared pieces of the neobank tools: table names, frozen clocks, id generation, employee lookup.

Every neobank write tool numbers its new row ``{PFX}-{len+1:08d}`` from the table's row count (defaults
and patched rows included), and the tools run on two different frozen instants (docs/benchmark.md#new-ids,
docs/benchmark.md#frozen-clocks).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, overload

from benchmark.envs.environment import Environment, Table
from benchmark.envs.neobank.rows import (
    ApprovalRequest,
    EmailNotification,
    Employee,
    OktaAppAccess,
    OktaGroupMembership,
    OktaSecurityAudit,
    SecurityIncident,
)
from benchmark.envs.records import R, TableRef

_MAIN = "sandbox_neobank_support_main_models_"
EMPLOYEES: TableRef[Employee] = TableRef(_MAIN + "employees")
OKTA_GROUPS: TableRef[OktaGroupMembership] = TableRef(_MAIN + "okta_group_membership")
OKTA_APPS: TableRef[OktaAppAccess] = TableRef(_MAIN + "okta_app_access")
SECURITY_AUDIT: TableRef[OktaSecurityAudit] = TableRef(_MAIN + "okta_security_audit")
SECURITY_INCIDENTS: TableRef[SecurityIncident] = TableRef(_MAIN + "security_incidents")
APPROVALS: TableRef[ApprovalRequest] = TableRef(_MAIN + "approval_requests")
NOTIFICATIONS: TableRef[EmailNotification] = TableRef(_MAIN + "email_notifications")

PROVISION_NOW = dt.datetime(2025, 12, 17, 10, 0, 0, tzinfo=dt.UTC)
"""Clock of device age, retire, allocate and provision."""

INCIDENT_NOW = dt.datetime(2025, 12, 18, 10, 0, 0, tzinfo=dt.UTC)
"""Clock of the incident window, security actions, notifications and procurement."""


def next_id(table: Table[R], prefix: str, width: int = 8) -> str:
    """``{prefix}-{len+1}`` zero-padded; no collision check, as in the reference."""
    return f"{prefix}-{table.count() + 1:0{width}d}"


def employee_by_email(env: Environment, email: str) -> Employee | None:
    """The first employee row with exactly this e-mail (case-sensitive, store order)."""
    found = env.table(EMPLOYEES).where(email=email)
    return found[0] if found else None


@overload
def value(member: str) -> str: ...
@overload
def value(member: None) -> None: ...
@overload
def value(member: str | None) -> str | None: ...
def value(member: str | None) -> str | None:
    """An enum member's value (records and inputs hold str-Enum members of different classes)."""
    return getattr(member, "value", member)


def without_none(data: dict[str, Any]) -> dict[str, Any]:
    """A nested output record as the reference's recursive ``exclude_none`` dump renders it."""
    return {k: v for k, v in data.items() if v is not None}
