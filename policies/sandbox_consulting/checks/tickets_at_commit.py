"""Zendesk tickets at commit: the session's end state (resolved, category tags, priority, the
records and approvals a ticket names, pending while something is open, one requester).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

from .lookups import (
    APPROVALS,
    CATEGORY_TAGS,
    PARTNER,
    RESOLVED_STATUSES,
    _employees,
    _list,
    _low,
    _requester_email,
)
from .tickets import _set, _written_tickets


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
