"""Approvals: the approver a request type needs, and a validated engagement code."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    ASSIGNMENTS,
    SECURITY_DIRECTOR,
    SF_ENGAGEMENTS,
    _all,
    _arguments,
    _employees,
    _engagement_valid,
    _low,
    _with_backups,
)


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
