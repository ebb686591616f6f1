"""The consulting pack's tables and the policy's constants (agent, tags, field formats, levels,
thresholds), and the helpers the checks share: whole-table reads, dates, employees, approvals,
engagements, courses, clearances and NDAs.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from guard.checks import CheckContext

TICKETS = "zendesk_tickets"
COMMENT_TABLES = frozenset({"zendesk_comments", "zendesk_ticket_comments"})
AGENT_ID = "157"
RESOLVED_STATUSES = frozenset({"pending", "hold", "solved"})
CATEGORY_TAGS = frozenset(
    {
        "software_access",
        "hardware_request",
        "expense_support",
        "travel_support",
        "training_enrollment",
        "client_access",
        "document_access",
        "onboarding",
        "other",
    }
)
CUSTOM_FIELD_FORMATS = {
    "engagement_code": re.compile(r"ENG-\d{7}"),
    "asset_id": re.compile(r"MSG\d{8}"),
    "catalog_id": re.compile(r"CAT-\d{7}"),
    "client_id": re.compile(r"CLT-\d{7}"),
    "expense_report_id": re.compile(r"EXP-\d{7}"),
    "course_id": re.compile(r"CRS-\d{7}"),
    "folder_id": re.compile(r"FLD-\d{7}"),
    "hardware_order_id": re.compile(r"HWO-\d{7}"),
}
EMAIL = re.compile(r"[^\s,@]+@[^\s,@]+\.[^\s,@]+")

# System prompt §2.3: the Partner level gets urgent tickets; Approval Matrix §3.1 levels.
PARTNER = "Partner"
JUNIOR_LEVELS = frozenset({"Analyst", "Consultant", "Senior Consultant"})
MANAGER_LEVELS = frozenset({"Manager", "Senior Manager"})
SOFTWARE_COST_THRESHOLD = 500
# Software Access Requests §4.1: standard software is provisioned during onboarding, not requested.
STANDARD_SOFTWARE = ("microsoft office", "slack", "zoom", "workday", "concur", "salesforce")
SECURITY_DIRECTOR = "security.director@msg.com"
# Onboarding Provisioning §11.4: the four mandatory compliance courses (matched by title) and §11.5:
# the role-based software of phase 3.
MANDATORY_TRAININGS = ("ethics", "security awareness", "data privacy", "harassment")
PHASE_3_SOFTWARE = ("concur", "salesforce")

EMPLOYEES = "workday_employees"
APPROVALS = "approval_approval_requests"
ASSIGNMENTS = "mavenlink_employee_assignments"
SF_ENGAGEMENTS = "salesforce_crm_sf_engagements"


# -- helpers -----------------------------------------------------------------------------------------
# Whole small tables the checks read (literal statements: no SQL is built from values).
_ALL = {
    EMPLOYEES: "SELECT * FROM workday_employees",
    APPROVALS: "SELECT * FROM approval_approval_requests",
    ASSIGNMENTS: "SELECT * FROM mavenlink_employee_assignments",
    SF_ENGAGEMENTS: "SELECT * FROM salesforce_crm_sf_engagements",
    "degreed_training_enrollments": "SELECT * FROM degreed_training_enrollments",
    "degreed_training_courses": "SELECT * FROM degreed_training_courses",
    "client_access_clearance_record": "SELECT * FROM client_access_clearance_record",
    "client_access_nda_record": "SELECT * FROM client_access_nda_record",
}


def _all(ctx: CheckContext, table: str) -> list[dict[str, Any]]:
    return ctx.query(_ALL[table], {})


def _low(value: Any) -> str:
    return str(value).strip().lower() if value is not None else ""


def _list(value: Any) -> list[Any]:
    """A JSON list column as a list (SQLite hands back its text, PostgreSQL the decoded value)."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    return list(value) if isinstance(value, list | tuple) else [value]


def _when(value: Any) -> dt.datetime | None:
    """A stored datetime (ISO text, ``Z``/offset or naive) as an aware datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        moment = value
    else:
        try:
            moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _overlaps(start: dt.datetime | None, end: dt.datetime | None, other_start: Any, other_end: Any) -> bool:
    """Training Enrollment §8.5: training start <= engagement end AND training end >= engagement start.

    An engagement without an end date is open-ended; a training without dates cannot be compared.
    """
    if start is None or end is None:
        return False
    o_start, o_end = _when(other_start), _when(other_end)
    return (o_end is None or start <= o_end) and (o_start is None or end >= o_start)


def _arguments(ctx: CheckContext) -> Mapping[str, Any]:
    return ctx.call.arguments if ctx.call is not None else {}


def _employees(ctx: CheckContext) -> dict[str, dict[str, Any]]:
    return {_low(e["email"]): e for e in _all(ctx, EMPLOYEES)}


def _requester_email(ctx: CheckContext, requester_id: Any) -> str | None:
    """The corporate email of a Zendesk user (system prompt: both systems are linked via email)."""
    if requester_id is None:
        return None
    rows = ctx.query("SELECT email FROM zendesk_users WHERE id = :id", {"id": str(requester_id)})
    return _low(rows[0]["email"]) if rows else None


def _approvals(ctx: CheckContext, email: str, types: Iterable[str]) -> list[dict[str, Any]]:
    wanted = set(types)
    return [
        a for a in _all(ctx, APPROVALS) if _low(a["requester_email"]) == email and a["request_type"] in wanted
    ]


def _with_backups(emails: Iterable[str | None], employees: Mapping[str, dict[str, Any]]) -> set[str]:
    """Approvers and their designated backups (Approval Matrix: manager on leave -> backup)."""
    out: set[str] = set()
    for email in emails:
        if not email:
            continue
        out.add(_low(email))
        backup = (employees.get(_low(email)) or {}).get("backup_approver_email")
        if backup:
            out.add(_low(backup))
    return out


def _engagement_valid(ctx: CheckContext, code: str, email: str) -> bool:
    """custom_fields.engagement_code: the engagement exists, is active, and the employee is assigned."""
    statuses = [
        e["status"]
        for sql in (
            "SELECT status FROM mavenlink_mv_engagements WHERE engagement_code = :code",
            "SELECT status FROM salesforce_crm_sf_engagements WHERE engagement_code = :code",
        )
        for e in ctx.query(sql, {"code": code})
    ]
    if not statuses or any(s != "active" for s in statuses):
        return False
    assigned = ctx.query(
        "SELECT employee_email FROM mavenlink_employee_assignments WHERE engagement_code = :code",
        {"code": code},
    )
    return any(_low(a["employee_email"]) == email for a in assigned)


def _assigned_to_client(ctx: CheckContext, email: str, client_id: str) -> bool:
    """The employee is assigned to an active engagement of the client (Salesforce names the client)."""
    codes = {
        e["engagement_code"]
        for e in _all(ctx, SF_ENGAGEMENTS)
        if e["client_id"] == client_id and e["status"] == "active"
    }
    return any(
        a["engagement_code"] in codes and _low(a["employee_email"]) == email for a in _all(ctx, ASSIGNMENTS)
    )


def _completed_courses(ctx: CheckContext, email: str) -> set[str]:
    return {
        e["course_id"]
        for e in _all(ctx, "degreed_training_enrollments")
        if _low(e["employee_email"]) == email and e["completion_date"] is not None
    }


def _clearance(ctx: CheckContext, email: str) -> dict[str, Any] | None:
    return next(
        (c for c in _all(ctx, "client_access_clearance_record") if _low(c["employee_email"]) == email),
        None,
    )


def _nda_signed(ctx: CheckContext, email: str, client_id: str) -> bool:
    return any(
        _low(n["employee_email"]) == email and n["client_id"] == client_id and n["status"] == "signed"
        for n in _all(ctx, "client_access_nda_record")
    )
