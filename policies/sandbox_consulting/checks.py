"""Python checks of the consulting pack (Meridian Strategy Group internal support).

Two kinds of rules live here. Ticket rules read the change set of a call or of the session, so that
tickets already in the helpdesk before the session, which the agent did not touch, are not judged.
Provisioning and approval rules join several systems (Workday, Mavenlink, Salesforce, the approval
system, Degreed) by employee email, compare dates or read list fields (course prerequisites, a
client's required trainings), which is clearer in Python than in one portable SQL statement.

Every function receives a :class:`guard.checks.CheckContext` and returns the violating rows. They read
the shadow state through ``ctx.query`` (small tables, read whole) and never the call history.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

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


# -- tickets: what one call wrote -----------------------------------------------------------------
def _written_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == TICKETS and change.after is not None:
            yield change


def _changed(change: RowChange, field: str) -> bool:
    before = change.before or {}
    after = change.after or {}
    return change.op == "insert" or before.get(field) != after.get(field)


def _set(change: RowChange, field: str) -> Any:
    """The field's new value when the change set it (None when unchanged or cleared)."""
    return (change.after or {}).get(field) if _changed(change, field) else None


def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def tickets_created_open(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": (c.after or {}).get("status"), "expected": "open"}
        for c in _written_tickets(ctx)
        if c.op == "insert" and (c.after or {}).get("status") != "open"
    ]


def tickets_never_closed(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": "closed"}
        for c in _written_tickets(ctx)
        if _set(c, "status") == "closed"
    ]


def tickets_assigned_to_agent(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assignee = (change.after or {}).get("assignee_id")
        if _changed(change, "assignee_id") and str(assignee) != AGENT_ID:
            out.append({"ticket_id": change.key, "assignee_id": assignee})
    return out


def tickets_required_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    fields = ("subject", "description", "priority", "type", "requester_id")
    out = []
    for change in _written_tickets(ctx):
        if change.op != "insert":
            continue
        missing = [f for f in fields if (change.after or {}).get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


def tickets_no_incident(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "type": "incident"}
        for c in _written_tickets(ctx)
        if _set(c, "type") == "incident"
    ]


def tickets_unused_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        for field in ("organization_id", "due_at"):
            value = _set(change, field)
            if value not in (None, ""):
                out.append({"ticket_id": change.key, "field": field, "value": value})
    return out


def tickets_tags_without_hash(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        if not _changed(change, "tags"):
            continue
        bad = [t for t in _list((change.after or {}).get("tags")) if str(t).lstrip().startswith("#")]
        if bad:
            out.append({"ticket_id": change.key, "tags": bad})
    return out


def tickets_custom_field_formats(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        for field, pattern in CUSTOM_FIELD_FORMATS.items():
            value = _set(change, field)
            if value in (None, ""):
                continue
            # One identifier, or several comma-separated (an onboarding ticket's four courses).
            if not all(pattern.fullmatch(part.strip()) for part in str(value).split(",")):
                out.append({"ticket_id": change.key, "field": field, "value": value})
    return out


def tickets_approver_id_format(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        value = _set(change, "approver_id")
        if value in (None, ""):
            continue
        parts = str(value).split(",")
        well_formed = all(EMAIL.fullmatch(p) for p in parts)
        ordered = [p.lower() for p in parts] == sorted(p.lower() for p in parts)
        if not (well_formed and ordered):
            out.append({"ticket_id": change.key, "approver_id": value})
    return out


def tickets_engagement_code_validated(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        code = _set(change, "engagement_code")
        if code in (None, ""):
            continue
        email = _requester_email(ctx, (change.after or {}).get("requester_id"))
        if email is None or not _engagement_valid(ctx, str(code), email):
            out.append({"ticket_id": change.key, "engagement_code": code, "requester_email": email})
    return out


# -- tickets: the session's end state --------------------------------------------------------------
def tickets_resolved(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": (c.after or {}).get("status")}
        for c in _written_tickets(ctx)
        if (c.after or {}).get("status") not in RESOLVED_STATUSES
    ]


def every_request_has_a_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    if any(True for _ in _written_tickets(ctx)):
        return []
    written = sorted({c.table for c in ctx.changes})
    return [{"tickets_written": 0, "tables_written": written}]


def tickets_one_category_tag(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        tags = [str(t) for t in _list((change.after or {}).get("tags"))]
        categories = [t for t in tags if t in CATEGORY_TAGS]
        if len(categories) != 1:
            out.append({"ticket_id": change.key, "tags": tags})
    return out


def _ticket_employee(
    ctx: CheckContext, change: RowChange, employees: Mapping[str, dict[str, Any]]
) -> dict[str, Any] | None:
    email = _requester_email(ctx, (change.after or {}).get("requester_id"))
    return employees.get(email) if email else None


def partner_tickets_urgent(ctx: CheckContext) -> list[dict[str, Any]]:
    employees = _employees(ctx)
    out = []
    for change in _written_tickets(ctx):
        employee = _ticket_employee(ctx, change, employees)
        priority = (change.after or {}).get("priority")
        if employee is not None and employee["level"] == PARTNER and priority != "urgent":
            out.append({"ticket_id": change.key, "requester": employee["email"], "priority": priority})
    return out


def rejected_expense_tickets_high(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        report_id = (change.after or {}).get("expense_report_id")
        priority = (change.after or {}).get("priority")
        if report_id in (None, "") or priority in ("high", "urgent"):
            continue
        rows = ctx.query(
            "SELECT rejection_reason FROM concur_expense_reports WHERE id = :id", {"id": str(report_id)}
        )
        if rows and rows[0]["rejection_reason"] not in (None, ""):
            out.append({"ticket_id": change.key, "expense_report_id": report_id, "priority": priority})
    return out


def low_priority_only_informational(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "priority": "low", "type": (c.after or {}).get("type")}
        for c in _written_tickets(ctx)
        if (c.after or {}).get("priority") == "low" and (c.after or {}).get("type") != "question"
    ]


_REFERENCES = {
    "catalog_id": "SELECT id FROM software_catalog_software_catalog WHERE id = :v",
    "client_id": "SELECT id FROM salesforce_crm_clients WHERE id = :v",
    "expense_report_id": "SELECT id FROM concur_expense_reports WHERE id = :v",
    "course_id": "SELECT id FROM degreed_training_courses WHERE id = :v",
    "folder_id": "SELECT id FROM box_folders WHERE id = :v",
    "asset_id": "SELECT id FROM asset_management_devices WHERE id = :v",
}


def custom_field_references(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        for field, sql in _REFERENCES.items():
            for value in sorted(_ids(_set(change, field))):
                if not ctx.query(sql, {"v": value}):
                    out.append({"ticket_id": change.key, "field": field, "value": value})
    return out


def license_pool_matches_catalog(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        after = change.after or {}
        catalog_id, pool = after.get("catalog_id"), after.get("license_pool")
        if catalog_id in (None, "") or pool in (None, ""):
            continue
        rows = ctx.query(
            "SELECT pool_type FROM software_catalog_software_catalog WHERE id = :id", {"id": catalog_id}
        )
        if rows and rows[0]["pool_type"] != pool:
            out.append(
                {
                    "ticket_id": change.key,
                    "catalog_id": catalog_id,
                    "license_pool": pool,
                    "catalog_pool_type": rows[0]["pool_type"],
                }
            )
    return out


def device_type_matches_asset(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        after = change.after or {}
        asset_id, device_type = after.get("asset_id"), after.get("device_type")
        if asset_id in (None, "") or device_type in (None, ""):
            continue
        rows = ctx.query("SELECT device_type FROM asset_management_devices WHERE id = :id", {"id": asset_id})
        if rows and rows[0]["device_type"] != device_type:
            out.append(
                {
                    "ticket_id": change.key,
                    "asset_id": asset_id,
                    "device_type": device_type,
                    "asset_device_type": rows[0]["device_type"],
                }
            )
    return out


def approval_required_names_approvers(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "approval_required": "yes", "approver_id": None}
        for c in _written_tickets(ctx)
        if (c.after or {}).get("approval_required") == "yes"
        and (c.after or {}).get("approver_id") in (None, "")
    ]


def _session_tickets_by_requester(ctx: CheckContext) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for change in _written_tickets(ctx):
        email = _requester_email(ctx, (change.after or {}).get("requester_id"))
        if email:
            out.setdefault(email, []).append(change.after or {})
    return out


def approvals_recorded_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    """Approval requests the session created appear on a ticket of the requester (yes + approver)."""
    tickets = _session_tickets_by_requester(ctx)
    out = []
    for change in ctx.changes:
        if change.table != APPROVALS or change.op != "insert" or change.after is None:
            continue
        requester = _low(change.after.get("requester_email"))
        approver = _low(change.after.get("approver_email"))
        recorded = any(
            t.get("approval_required") == "yes"
            and approver in {_low(p) for p in str(t.get("approver_id") or "").split(",")}
            for t in tickets.get(requester, [])
        )
        if not recorded:
            out.append({"approval_id": change.key, "requester_email": requester, "approver_email": approver})
    return out


def _pending_ticket_for(
    tickets: Mapping[str, list[dict[str, Any]]], email: str, what: dict[str, Any]
) -> list[dict[str, Any]]:
    statuses = [t.get("status") for t in tickets.get(email, [])]
    return [] if "pending" in statuses else [{**what, "employee_email": email, "ticket_statuses": statuses}]


def pending_while_approval_pending(ctx: CheckContext) -> list[dict[str, Any]]:
    """An approval request the session created is pending, so a ticket of its requester is pending."""
    tickets = _session_tickets_by_requester(ctx)
    out = []
    for change in ctx.changes:
        if change.table == APPROVALS and change.op == "insert" and change.after is not None:
            email = _low(change.after.get("requester_email"))
            out += _pending_ticket_for(tickets, email, {"approval_id": change.key})
    return out


def pending_while_prerequisite_in_progress(ctx: CheckContext) -> list[dict[str, Any]]:
    """A background check initiated or an NDA sent in the session leaves a ticket of the employee pending."""
    tickets = _session_tickets_by_requester(ctx)
    out = []
    for change in ctx.changes:
        after = change.after or {}
        if change.table == "client_access_clearance_record" and after.get("status") == "in_progress":
            what = {"clearance": "in_progress"}
        elif change.table == "client_access_nda_record" and after.get("status") == "sent_for_signature":
            what = {"nda": "sent_for_signature", "client_id": after.get("client_id")}
        else:
            continue
        out += _pending_ticket_for(tickets, _low(after.get("employee_email")), what)
    return out


def _ids(value: Any) -> set[str]:
    """A custom field's identifiers: one, or several comma-separated."""
    return {part.strip() for part in str(value or "").split(",") if part.strip()}


def _records_on_ticket(
    ctx: CheckContext, table: str, field: str, value_of: str, email_of: str = "employee_email"
) -> list[dict[str, Any]]:
    """Records of ``table`` the session inserted: some ticket of the employee names one of them."""
    tickets = _session_tickets_by_requester(ctx)
    inserted: dict[str, set[str]] = {}
    for change in ctx.changes:
        if change.table == table and change.op == "insert" and change.after is not None:
            email = _low(change.after.get(email_of))
            inserted.setdefault(email, set()).add(str(change.after.get(value_of)))
    out = []
    for email, values in inserted.items():
        if not any(values & _ids(t.get(field)) for t in tickets.get(email, [])):
            out.append({"employee_email": email, "field": field, "expected_one_of": sorted(values)})
    return out


def license_recorded_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    return _records_on_ticket(ctx, "license_management_license_allocation", "catalog_id", "catalog_id")


def folder_recorded_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    return _records_on_ticket(ctx, "box_folder_access_logs", "folder_id", "folder_id")


def asset_recorded_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    return _records_on_ticket(ctx, "asset_management_device_assignments", "asset_id", "asset_id")


def expense_recorded_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    """An overridden expense report (override_approved turned true) is named on the employee's ticket."""
    tickets = _session_tickets_by_requester(ctx)
    out = []
    for change in ctx.changes:
        if change.table != "concur_expense_reports" or change.op != "update" or change.after is None:
            continue
        if not change.after.get("override_approved") or (change.before or {}).get("override_approved"):
            continue
        email = _low(change.after.get("employee_email"))
        if not any(change.key in _ids(t.get("expense_report_id")) for t in tickets.get(email, [])):
            out.append({"employee_email": email, "expense_report_id": change.key})
    return out


# -- approvals -------------------------------------------------------------------------------------
def approver_by_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    """The approver is the one the Approval Matrix names for the request type (or their backup)."""
    args = _arguments(ctx)
    request_type = args.get("request_type")
    requester = _low(args.get("requester_email"))
    approver = _low(args.get("approver_email"))
    employees = _employees(ctx)
    employee = employees.get(requester)
    if employee is None or not approver:
        return []
    manager, partner = employee.get("manager_email"), employee.get("partner_email")
    if request_type in ("hardware_replacement", "expense_override", "travel", "document_access"):
        roles: list[str | None] = [manager]
    elif request_type in ("software_access", "training_cost"):
        roles = [manager, partner]
    elif request_type == "training_engagement_coordination":
        roles = [
            a["senior_manager_email"]
            for a in _all(ctx, ASSIGNMENTS)
            if _low(a["employee_email"]) == requester
        ]
    elif request_type == "client_access":
        codes = {
            a["engagement_code"] for a in _all(ctx, ASSIGNMENTS) if _low(a["employee_email"]) == requester
        }
        roles = [
            e["engagement_manager_email"] for e in _all(ctx, SF_ENGAGEMENTS) if e["engagement_code"] in codes
        ]
        roles.append(SECURITY_DIRECTOR)
    else:
        return []
    allowed = _with_backups(roles, employees)
    if employee.get("backup_approver_email"):
        # Workday keeps a backup approver on the employee's own record too.
        allowed.add(_low(employee["backup_approver_email"]))
    if not allowed or approver in allowed:
        return []
    return [
        {
            "request_type": request_type,
            "requester_email": requester,
            "approver_email": approver,
            "expected_one_of": sorted(allowed),
        }
    ]


def approval_engagement_code_validated(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    code = args.get("engagement_code")
    requester = _low(args.get("requester_email"))
    if code in (None, "") or _engagement_valid(ctx, str(code), requester):
        return []
    return [{"engagement_code": code, "requester_email": requester}]


# -- provisioning only after approval ---------------------------------------------------------------
# Which approval request types gate which provisioning step (Approval Matrix §3.9).
_GATED: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("okta_provision_access", None): ("software_access",),
    ("license_management_api", "allocate"): ("software_access",),
    ("asset_management_api", "assign_device"): ("hardware_replacement",),
    ("client_access_api", "provision_vpn"): ("client_access",),
    ("client_access_api", "provision_client_system"): ("client_access",),
    ("box_api", "grant_folder_access"): ("document_access",),
    ("degreed_api", "enroll_employee"): ("training_cost", "training_engagement_coordination"),
    ("concur_api", "override_expense_rejection"): ("expense_override",),
}


def _provisioned_employee(ctx: CheckContext) -> tuple[str | None, tuple[str, ...]]:
    if ctx.call is None:
        return None, ()
    args = ctx.call.arguments
    action = args.get("action") if ctx.call.tool != "okta_provision_access" else None
    types = _GATED.get((ctx.call.tool, action))
    if types is None:
        return None, ()
    if ctx.call.tool == "concur_api":
        rows = ctx.query(
            "SELECT employee_email FROM concur_expense_reports WHERE id = :id",
            {"id": str(args.get("expense_report_id"))},
        )
        return (_low(rows[0]["employee_email"]) if rows else None), types
    return _low(args.get("email")) or None, types


def no_provisioning_while_approval_open(ctx: CheckContext) -> list[dict[str, Any]]:
    email, types = _provisioned_employee(ctx)
    if email is None or ctx.call is None:
        return []
    args = ctx.call.arguments
    if ctx.call.tool == "okta_provision_access" and _is_standard_software(args.get("app_name")):
        return []  # standard software needs no request and no approval (§4.1, §11.3)
    code = args.get("engagement_code") if ctx.call.tool == "license_management_api" else None
    return [
        {
            "approval_id": a["id"],
            "request_type": a["request_type"],
            "approver_email": a["approver_email"],
            "status": a["status"],
        }
        for a in _approvals(ctx, email, types)
        if a["status"] in ("pending", "rejected")
        # an approval for another engagement belongs to another request
        and not (code and a["engagement_code"] and a["engagement_code"] != code)
    ]


def expense_override_after_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    if args.get("action") != "override_expense_rejection" or args.get("override_reason") == "system_error":
        # system_error: Concur flagged a compliant expense; none of the approval scenarios applies.
        return []
    email, _types = _provisioned_employee(ctx)
    if email is None:
        return []
    approver = _low(args.get("approver_email"))
    approved = [
        a
        for a in _approvals(ctx, email, ("expense_override",))
        if a["status"] == "approved" and _low(a["approver_email"]) == approver
    ]
    if approved:
        return []
    return [
        {
            "expense_report_id": args.get("expense_report_id"),
            "employee_email": email,
            "approver_email": approver,
        }
    ]


def software_allocation_after_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    """Specialized software for a level that needs approval is allocated only once one is approved."""
    args = _arguments(ctx)
    if args.get("action") != "allocate":
        return []
    email = _low(args.get("email"))
    employee = _employees(ctx).get(email)
    rows = ctx.query(
        "SELECT name, annual_cost FROM software_catalog_software_catalog WHERE id = :id",
        {"id": str(args.get("catalog_id"))},
    )
    if employee is None or not rows or _is_standard_software(rows[0]["name"]):
        return []
    level, cost = employee["level"], rows[0]["annual_cost"] or 0
    needed = level in JUNIOR_LEVELS or (level in MANAGER_LEVELS and cost >= SOFTWARE_COST_THRESHOLD)
    if not needed:
        return []
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("software_access",))):
        return []
    return [{"email": email, "level": level, "catalog_id": args.get("catalog_id"), "annual_cost": cost}]


def _is_standard_software(name: Any) -> bool:
    return any(s in _low(name) for s in STANDARD_SOFTWARE)


def allocation_needs_engagement_code(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    if args.get("action") != "allocate" or args.get("engagement_code") not in (None, ""):
        return []
    rows = ctx.query(
        "SELECT name FROM software_catalog_software_catalog WHERE id = :id",
        {"id": str(args.get("catalog_id"))},
    )
    if rows and _is_standard_software(rows[0]["name"]):
        return []
    return [{"catalog_id": args.get("catalog_id"), "name": rows[0]["name"] if rows else None}]


def allocation_engagement_code_validated(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    code = args.get("engagement_code")
    if args.get("action") != "allocate" or code in (None, ""):
        return []
    email = _low(args.get("email"))
    if _engagement_valid(ctx, str(code), email):
        return []
    return [{"engagement_code": code, "email": email}]


# -- training ----------------------------------------------------------------------------------------
def _enrollment(ctx: CheckContext) -> tuple[str, dict[str, Any]] | None:
    args = _arguments(ctx)
    if args.get("action") != "enroll_employee":
        return None
    rows = ctx.query(
        "SELECT * FROM degreed_training_courses WHERE id = :id", {"id": str(args.get("course_id"))}
    )
    if not rows:
        return None
    return _low(args.get("email")), rows[0]


def training_seat_available(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    _email, course = found
    if course["max_seats"] is None:
        return []
    taken = sum(
        1
        for e in _all(ctx, "degreed_training_enrollments")
        if e["course_id"] == course["id"] and e["completion_date"] is None
    )
    if taken < course["max_seats"]:
        return []
    return [{"course_id": course["id"], "max_seats": course["max_seats"], "enrolled": taken}]


def training_prerequisites_completed(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    missing = sorted(set(map(str, _list(course["prerequisites"]))) - _completed_courses(ctx, email))
    if not missing:
        return []
    return [{"course_id": course["id"], "email": email, "missing_prerequisites": missing}]


def conference_not_during_active_engagement(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    if course["training_category"] != "conference":
        return []
    start, end = _when(course["start_date"]), _when(course["end_date"])
    return [
        {"course_id": course["id"], "engagement_code": a["engagement_code"], "assignment_end": a["end_date"]}
        for a in _all(ctx, ASSIGNMENTS)
        if _low(a["employee_email"]) == email
        and a["assignment_status"] == "active"
        and _overlaps(start, end, a["start_date"], a["end_date"])
    ]


def training_cost_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    if not course["cost"] or course["cost"] <= 0:
        return []
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("training_cost",))):
        return []
    return [{"course_id": course["id"], "cost": course["cost"], "email": email}]


def training_overlap_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    start, end = _when(course["start_date"]), _when(course["end_date"])
    employees = _employees(ctx)
    approved = {
        _low(a["approver_email"])
        for a in _approvals(ctx, email, ("training_engagement_coordination",))
        if a["status"] == "approved"
    }
    out = []
    for a in _all(ctx, ASSIGNMENTS):
        if _low(a["employee_email"]) != email or a["assignment_status"] not in ("active", "booked"):
            continue
        if not _overlaps(start, end, a["start_date"], a["end_date"]):
            continue
        if approved & _with_backups([a["senior_manager_email"]], employees):
            continue
        out.append(
            {
                "course_id": course["id"],
                "engagement_code": a["engagement_code"],
                "senior_manager_email": a["senior_manager_email"],
            }
        )
    return out


# -- client access -----------------------------------------------------------------------------------
def _client_call(ctx: CheckContext) -> tuple[str, str] | None:
    args = _arguments(ctx)
    if args.get("action") not in ("provision_vpn", "provision_client_system"):
        return None
    client_id = args.get("client_id")
    if client_id in (None, ""):
        return None
    return _low(args.get("email")), str(client_id)


def client_access_engagement(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _client_call(ctx)
    if found is None:
        return []
    email, client_id = found
    if _assigned_to_client(ctx, email, client_id):
        return []
    return [{"email": email, "client_id": client_id}]


def _missing_client_prerequisites(ctx: CheckContext, email: str, client_id: str) -> list[str]:
    rows = ctx.query("SELECT * FROM salesforce_crm_clients WHERE id = :id", {"id": client_id})
    if not rows:
        return []
    client = rows[0]
    missing = []
    clearance = _clearance(ctx, email)
    if clearance is None or clearance["status"] != "cleared":
        missing.append("clearance")
    elif client["clearance_level"] == "high_security" and clearance["clearance_level"] != "high_security":
        missing.append("high_security clearance")
    if client["requires_nda"] and not _nda_signed(ctx, email, client_id):
        missing.append("nda")
    courses = sorted(
        set(map(str, _list(client["required_training_courses"]))) - _completed_courses(ctx, email)
    )
    missing += [f"training {c}" for c in courses]
    return missing


def client_access_prerequisites(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _client_call(ctx)
    if found is None:
        return []
    email, client_id = found
    missing = _missing_client_prerequisites(ctx, email, client_id)
    return [{"email": email, "client_id": client_id, "missing": missing}] if missing else []


def client_access_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _client_call(ctx)
    if found is None:
        return []
    email, client_id = found
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("client_access",))):
        return []
    return [{"email": email, "client_id": client_id}]


# -- documents -----------------------------------------------------------------------------------------
def _folder_call(ctx: CheckContext) -> tuple[str, dict[str, Any]] | None:
    args = _arguments(ctx)
    if args.get("action") != "grant_folder_access":
        return None
    rows = ctx.query("SELECT * FROM box_folders WHERE id = :id", {"id": str(args.get("folder_id"))})
    if not rows:
        return None
    return _low(args.get("email")), rows[0]


def confidential_folder_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _folder_call(ctx)
    if found is None:
        return []
    email, folder = found
    if folder["confidentiality_level"] != "confidential":
        return []
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("document_access",))):
        return []
    return [{"folder_id": folder["id"], "email": email, "confidentiality_level": "confidential"}]


def client_confidential_prerequisites(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _folder_call(ctx)
    if found is None:
        return []
    email, folder = found
    if folder["confidentiality_level"] != "client_confidential":
        return []
    client_id = folder["client_id"]
    missing = []
    if not client_id or not _assigned_to_client(ctx, email, client_id):
        missing.append("engagement assignment")
    # Clearance is not judged here: §10.4 makes it conditional ("If the client requires security
    # clearance") and no record says which clients do (see README, tried and dropped).
    if not client_id or not _nda_signed(ctx, email, client_id):
        missing.append("nda")
    if not missing:
        return []
    return [{"folder_id": folder["id"], "email": email, "client_id": client_id, "missing": missing}]


# -- onboarding ------------------------------------------------------------------------------------
def _phase_3_target(ctx: CheckContext) -> tuple[str, str] | None:
    """(employee, software name) of a licence or Okta grant of phase-3 onboarding software."""
    if ctx.call is None:
        return None
    args = ctx.call.arguments
    if ctx.call.tool == "okta_provision_access":
        name = _low(args.get("app_name"))
    elif args.get("action") == "allocate":
        rows = ctx.query(
            "SELECT name FROM software_catalog_software_catalog WHERE id = :id",
            {"id": str(args.get("catalog_id"))},
        )
        name = _low(rows[0]["name"]) if rows else ""
    else:
        return None
    if not any(s in name for s in PHASE_3_SOFTWARE):
        return None
    return _low(args.get("email")), name


def phase_3_after_mandatory_training(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _phase_3_target(ctx)
    if found is None:
        return []
    email, name = found
    titles = {c["id"]: _low(c["title"]) for c in _all(ctx, "degreed_training_courses")}
    completed = [titles.get(c, "") for c in _completed_courses(ctx, email)]
    missing = [m for m in MANDATORY_TRAININGS if not any(m in t for t in completed)]
    if not missing:
        return []
    return [{"email": email, "software": name, "mandatory_trainings_not_completed": missing}]


# -- client access approvals -------------------------------------------------------------------------
def client_access_approval_after_prerequisites(ctx: CheckContext) -> list[dict[str, Any]]:
    """A client_access approval is created only once the client's prerequisites are complete.

    The client is the one of the named engagement, else of the requester's engagements managed by
    the approver (or any of them, for the Security Director); the rule fires only when every such
    client still has a prerequisite missing.
    """
    args = _arguments(ctx)
    if args.get("request_type") != "client_access":
        return []
    requester = _low(args.get("requester_email"))
    approver = _low(args.get("approver_email"))
    code = args.get("engagement_code")
    assigned = {
        a["engagement_code"] for a in _all(ctx, ASSIGNMENTS) if _low(a["employee_email"]) == requester
    }
    engagements = _all(ctx, SF_ENGAGEMENTS)
    if code not in (None, ""):
        clients = {e["client_id"] for e in engagements if e["engagement_code"] == code}
    else:
        clients = {
            e["client_id"]
            for e in engagements
            if e["engagement_code"] in assigned
            and (approver == SECURITY_DIRECTOR or _low(e["engagement_manager_email"]) == approver)
        }
    if not clients:
        return []
    missing = {c: _missing_client_prerequisites(ctx, requester, c) for c in sorted(clients)}
    if all(missing.values()):
        return [{"requester_email": requester, "client_id": c, "missing": m} for c, m in missing.items()]
    return []


def tickets_one_requester(ctx: CheckContext) -> list[dict[str, Any]]:
    """The tickets the session wrote are its requester's: one requester across all of them."""
    requesters: dict[str, list[str]] = {}
    for change in _written_tickets(ctx):
        requester = (change.after or {}).get("requester_id")
        if requester is not None:
            requesters.setdefault(str(requester), []).append(change.key)
    if len(requesters) <= 1:
        return []
    return [{"requester_id": r, "tickets": keys} for r, keys in sorted(requesters.items())]
