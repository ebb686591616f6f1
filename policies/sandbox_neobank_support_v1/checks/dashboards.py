"""BI dashboards: a known group, and the approvals a dashboard grant needs."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import _approved_requests, _call_args, _dept, _employee

# -- BI dashboards ----------------------------------------------------------------------------------------
DASHBOARD_GROUPS: dict[str, tuple[str, str]] = {  # BI Dashboard Access §4.1: group -> department, sensitivity
    "bi_finance_viewers": ("finance_accounting", "financial_data"),
    "bi_executive": ("executive_leadership", "confidential"),
    "bi_product_analytics": ("product_engineering", "confidential"),
    "bi_operations": ("it_operations", "confidential"),
    "bi_compliance": ("compliance_risk", "compliance_restricted"),
    "bi_marketing_viewers": ("marketing_growth", "confidential"),
}


def bi_known_group(ctx: CheckContext) -> list[dict[str, Any]]:
    group = _call_args(ctx).get("group_name")
    if group not in DASHBOARD_GROUPS:
        return [{"group_name": group, "dashboard_access_groups": sorted(DASHBOARD_GROUPS)}]
    return []


def bi_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _call_args(ctx)
    group = args.get("group_name")
    employee = _employee(ctx, args.get("email"))
    if employee is None or group not in DASHBOARD_GROUPS:
        return []
    own_department, sensitivity = DASHBOARD_GROUPS[group]
    department = _dept(employee)
    if department == own_department:
        return []  # default access to the own department's dashboards
    if sensitivity != "compliance_restricted" and department == "executive_leadership":
        return []  # auto-approved for Executive & Leadership
    approvers = {
        "financial_data": {"finance_accounting"},
        "compliance_restricted": {"compliance_risk"},
    }.get(sensitivity)
    approved = [
        r
        for r in _approved_requests(ctx, employee["id"])
        if approvers is None or r["approver_department"] in approvers
    ]
    if not approved:
        return [{"employee_id": employee["id"], "group_name": group, "sensitivity": sensitivity}]
    return []
