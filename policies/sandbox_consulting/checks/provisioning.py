"""Provisioning only after approval: no provisioning while an approval is open, expense overrides
and software allocations after their approval, engagement codes on allocations.
"""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    JUNIOR_LEVELS,
    MANAGER_LEVELS,
    SOFTWARE_COST_THRESHOLD,
    STANDARD_SOFTWARE,
    _approvals,
    _arguments,
    _employees,
    _engagement_valid,
    _low,
)

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
