"""The neobank pack's tables and the policy's constants (agent, tags, urgency and escalation owners),
and the helpers the checks share: the call's arguments, the rows a call or the session wrote, and
employee and approval lookups.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

_MAIN = "sandbox_neobank_support_main_models_"
EMPLOYEES = _MAIN + "employees"
ASSETS = _MAIN + "hardware_assets"
ASSIGNMENTS = _MAIN + "asset_assignments"
APPROVALS = _MAIN + "approval_requests"
OKTA_APPS = _MAIN + "okta_app_access"
INCIDENTS = _MAIN + "security_incidents"
TICKETS = "zendesk_tickets"
COMMENT_TABLES = frozenset({"zendesk_comments", "zendesk_ticket_comments"})

AGENT_ID = "2"  # System prompt §2.2: assignee_id "set to 2 (system agent ID)"
ORGANIZATION_ID = "1"  # §2.2: organization_id "Always set to "1""
CREATION_OWNER = "it_support"  # §2.3: "On ticket creation always set owner to `it_support`"
SYSTEM_STATUSES = frozenset({"new", "closed"})  # §2.4: "Agent can't set this status"
ALLOWED_TAGS = frozenset(  # §2.8 Tagging Strategy
    {
        "system_error",
        "license_waitlist",
        "production_access",
        "offboarding",
        "temporary_access",
        "redirected",
        "escalated",
    }
)
ASSET_TAG = re.compile(r"VDB-HW-\d{5}")  # §2.3: "Format: `VDB-HW-#####` (5 digits) or null"
URGENCY_BY_PRIORITY = {  # §2.11: "low/normal → standard, high → urgent, urgent → critical"
    "low": "standard",
    "normal": "standard",
    "high": "urgent",
    "urgent": "critical",
}
TEAM_BY_ESCALATION = {  # §2.9 resolution categories ↔ §2.12 escalation owners
    "escalated_it_ops": "it_ops_team",
    "escalated_it_inf": "it_inf_team",
    "escalated_it_sec": "it_sec_team",
    "escalated_ops": "ops_team",
    "escalated_compl": "comp_team",
    "escalated_engin": "engin_team",
}


# -- helpers ------------------------------------------------------------------------------------------
def _call_args(ctx: CheckContext) -> Mapping[str, Any]:
    return ctx.call.arguments if ctx.call is not None else {}


def _written(ctx: CheckContext, table: str) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == table and change.after is not None:
            yield change


def _inserted(ctx: CheckContext, table: str) -> Iterator[dict[str, Any]]:
    for change in ctx.changes:
        if change.table == table and change.op == "insert" and change.after is not None:
            yield change.after


def _changed(change: RowChange, field: str) -> bool:
    before = change.before or {}
    after = change.after or {}
    return change.op == "insert" or before.get(field) != after.get(field)


def _ids(text: Any) -> list[str]:
    """A comma-separated id list of a ticket field (approver_id, approval_request_ids)."""
    if not text:
        return []
    return [part.strip() for part in str(text).split(",") if part.strip()]


def _employee(ctx: CheckContext, email: Any) -> dict[str, Any] | None:
    if not email:
        return None
    rows = ctx.query(
        "SELECT * FROM sandbox_neobank_support_main_models_employees AS e WHERE e.email = :email",
        {"email": str(email)},
    )
    return rows[0] if rows else None


def _employee_by_id(ctx: CheckContext, employee_id: Any) -> dict[str, Any] | None:
    if not employee_id:
        return None
    rows = ctx.query(
        "SELECT * FROM sandbox_neobank_support_main_models_employees AS e WHERE e.id = :id",
        {"id": str(employee_id)},
    )
    return rows[0] if rows else None


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "t", "yes"}
    return bool(value)


def _dept(employee: Mapping[str, Any]) -> str:
    """Department as the policy names it (the data spells some segments shorter)."""
    return {
        "hr": "hr_people_operations",
        "sales": "sales_business_development",
        "marketing": "marketing_growth",
    }.get(str(employee.get("department")), str(employee.get("department")))


def _requester_employee(ctx: CheckContext, ticket: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ticket's requester (a Zendesk user) as a Workday employee, matched by e-mail."""
    requester = ticket.get("requester_id")
    if requester is None:
        return None
    rows = ctx.query(
        "SELECT e.*"
        " FROM zendesk_users AS u"
        " JOIN sandbox_neobank_support_main_models_employees AS e"
        " ON e.email = u.email"
        " WHERE u.id = :requester_id",
        {"requester_id": str(requester)},
    )
    return rows[0] if rows else None


def _session_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    yield from _written(ctx, TICKETS)


def _approved_requests(ctx: CheckContext, employee_id: str) -> list[dict[str, Any]]:
    return ctx.query(
        "SELECT r.id, r.request_type, r.approver_id, a.department AS approver_department"
        " FROM sandbox_neobank_support_main_models_approval_requests AS r"
        " LEFT JOIN sandbox_neobank_support_main_models_employees AS a ON a.id = r.approver_id"
        " WHERE r.requester_id = :employee_id AND r.status = 'approved'",
        {"employee_id": employee_id},
    )
