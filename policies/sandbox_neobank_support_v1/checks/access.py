"""Access to tools: the policy's tools and levels, from the names the tools take (contractors,
expiries, roles, production), and at commit temporary and production access documented on the
ticket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guard.checks import CheckContext

from .lookups import (
    _MAIN,
    OKTA_APPS,
    _call_args,
    _dept,
    _employee,
    _employee_by_id,
    _inserted,
    _requester_employee,
    _session_tickets,
    _truthy,
)

# -- access to tools: the policy's tools and levels, from the names the tools take ----------------------
WRITE_LEVELS = frozenset({"write", "read_write", "admin", "editor", "write non-PII only"})
PUBLIC = ("slack", "confluence", "zoom", "jira")


def classify_access(app_name: Any, level: Any) -> tuple[str, int] | None:
    """(tool, sensitivity group) of Access to Tools §3.1 for an app name and level; None if not listed."""
    name = re.sub(r"[_\-]+", " ", str(app_name or "")).lower()
    level = str(level or "")
    words = set(re.findall(r"[a-z0-9]+", name))
    if "splunk" in words:
        return ("splunk_siem", 5)
    if "vpn" in words:
        return ("vpn_engineer_prod", 5) if level == "engineer_prod" else ("vpn", 1)
    if "aws" in words and any(w.startswith("prod") for w in words):
        return ("aws_production", 5)
    if any(w.startswith("prod") for w in words) and words & {"db", "database", "databases"}:
        return ("production_database", 5)
    if ("admin" in words and "panel" in words) or "adminpanel" in words:
        return ("admin_panel_write", 4) if level in WRITE_LEVELS else ("admin_panel_read_only", 3)
    if "pii" in words:
        return ("customer_pii_write", 4) if level in WRITE_LEVELS else ("customer_pii_read_only", 3)
    if "snowflake" in words:
        return ("snowflake_raw_replica", 4) if "raw" in words else ("snowflake_depersonalized", 3)
    if "github" in words:
        return ("github_write", 3) if level in WRITE_LEVELS else ("github_read_only", 2)
    if "actimize" in words:
        return ("actimize", 3)
    if "workday" in words:
        return ("workday_elevated", 3) if level == "elevated" else ("workday_standard", 1)
    if words & {"salesforce", "tableau", "quantivate"}:
        return (sorted(words & {"salesforce", "tableau", "quantivate"})[0], 2)
    if words & set(PUBLIC):
        return (sorted(words & set(PUBLIC))[0], 1)
    return None


# Access to Tools §3.4: the departments that are not "Forbidden" for a tool.
NOT_FORBIDDEN: dict[str, frozenset[str]] = {
    "customer_pii_write": frozenset(),
    "workday_elevated": frozenset({"hr_people_operations"}),
    "github_write": frozenset({"product_engineering", "it_operations", "it_security"}),
    "aws_production": frozenset({"compliance_risk", "it_operations", "it_security", "product_engineering"}),
    "production_database": frozenset(
        {"compliance_risk", "it_operations", "it_security", "product_engineering"}
    ),
    "vpn_engineer_prod": frozenset(
        {"compliance_risk", "it_operations", "it_security", "product_engineering"}
    ),
    "splunk_siem": frozenset({"it_security", "it_operations"}),
    "admin_panel_write": frozenset({"customer_support", "compliance_risk", "it_operations"}),
    "customer_pii_read_only": frozenset(
        {"customer_support", "compliance_risk", "it_operations", "marketing_growth"}
    ),
    "snowflake_raw_replica": frozenset({"product_engineering", "compliance_risk"}),
}
FORBIDDEN: dict[str, frozenset[str]] = {
    "actimize": frozenset({"hr_people_operations", "sales_business_development"}),
}


def _provision(ctx: CheckContext) -> tuple[dict[str, Any], tuple[str, int]] | None:
    args = _call_args(ctx)
    employee = _employee(ctx, args.get("email"))
    access = classify_access(args.get("app_name"), args.get("access_level"))
    if employee is None or access is None:
        return None
    return employee, access


def _access_row(
    employee: Mapping[str, Any], access: tuple[str, int], args: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "employee_id": employee["id"],
        "app_name": args.get("app_name"),
        "access_level": args.get("access_level"),
        "policy_tool": access[0],
        "sensitivity_group": access[1],
    }


def access_contractor_group_4_5(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _provision(ctx)
    if found is None:
        return []
    employee, access = found
    if _truthy(employee.get("is_contractor")) and access[1] >= 4:
        return [{**_access_row(employee, access, _call_args(ctx)), "is_contractor": True}]
    return []


def access_status_limits(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _provision(ctx)
    if found is None:
        return []
    employee, access = found
    status = employee.get("employment_status")
    if status in {"on_leave", "departing"} and access[1] >= 2:
        return [{**_access_row(employee, access, _call_args(ctx)), "employment_status": status}]
    return []


def access_contractor_temporary(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _provision(ctx)
    if found is None:
        return []
    employee, access = found
    args = _call_args(ctx)
    if (
        _truthy(employee.get("is_contractor"))
        and access[1] in (2, 3)
        and not _truthy(args.get("is_temporary"))
    ):
        return [{**_access_row(employee, access, args), "is_temporary": args.get("is_temporary")}]
    return []


def access_contractor_expiry(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _call_args(ctx)
    employee = _employee(ctx, args.get("email"))
    if employee is None or not _truthy(employee.get("is_contractor")):
        return []
    expiry, contract_end = args.get("access_expiry_date"), employee.get("contract_end_date")
    if not expiry or not contract_end or not _truthy(args.get("is_temporary")):
        return []
    if str(expiry)[:10] > str(contract_end)[:10]:
        return [
            {
                "employee_id": employee["id"],
                "access_expiry_date": expiry,
                "contract_end_date": contract_end,
            }
        ]
    return []


def access_expiry_when_temporary(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _call_args(ctx)
    temporary, expiry = _truthy(args.get("is_temporary")), args.get("access_expiry_date")
    if temporary != bool(expiry):
        return [
            {
                "email": args.get("email"),
                "app_name": args.get("app_name"),
                "is_temporary": args.get("is_temporary"),
                "access_expiry_date": expiry,
            }
        ]
    return []


_INCIDENT_PROCEDURE = (
    "SELECT i.id, i.severity FROM sandbox_neobank_support_main_models_security_incidents AS i"
    " WHERE i.is_active = TRUE AND i.severity IN ('SEV1', 'SEV2', 'SEV3')"
)


def access_forbidden_by_role(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _provision(ctx)
    if found is None:
        return []
    employee, access = found
    department = _dept(employee)
    tool = access[0]
    if access[1] == 5 and tool != "splunk_siem" and ctx.query(_INCIDENT_PROCEDURE, {}):
        return []  # production access during an active incident follows Section 10, not §3.4
    forbidden = (tool in NOT_FORBIDDEN and department not in NOT_FORBIDDEN[tool]) or (
        department in FORBIDDEN.get(tool, frozenset())
    )
    if forbidden:
        return [{**_access_row(employee, access, _call_args(ctx)), "department": employee.get("department")}]
    return []


_ACTIVE_SEV1_SEV2 = (
    "SELECT i.id, i.severity FROM sandbox_neobank_support_main_models_security_incidents AS i"
    " WHERE i.is_active = TRUE AND i.severity IN ('SEV1', 'SEV2')"
)


def access_production_temp_only(ctx: CheckContext) -> list[dict[str, Any]]:
    """Product & Engineering gets Group 5 (not Splunk) only temporarily, during an active SEV1/SEV2."""
    found = _provision(ctx)
    if found is None:
        return []
    employee, access = found
    if _dept(employee) != "product_engineering" or access[1] != 5 or access[0] == "splunk_siem":
        return []
    args = _call_args(ctx)
    active = ctx.query(_ACTIVE_SEV1_SEV2, {})
    if not _truthy(args.get("is_temporary")) or not active:
        return [
            {
                **_access_row(employee, access, args),
                "is_temporary": args.get("is_temporary"),
                "active_sev1_sev2_incidents": len(active),
            }
        ]
    return []


# -- temporary / production access documented on the ticket (at_commit) ------------------------------------
def _tickets_of(ctx: CheckContext, employee_id: Any) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        requester = _requester_employee(ctx, ticket)
        if requester is not None and requester["id"] == employee_id:
            out.append(ticket)
    return out


def access_documented_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    """Temporary access gets the temporary_access tag and an expiry on the ticket; Group 5 access the
    production_access tag."""
    out = []
    for grant in _inserted(ctx, OKTA_APPS):
        tickets = _tickets_of(ctx, grant.get("employee_id"))
        if not tickets:
            continue
        needed: list[str] = []
        if _truthy(grant.get("is_temporary")):
            needed.append("temporary_access")
        access = classify_access(grant.get("app_name"), grant.get("access_level"))
        if access is not None and access[1] == 5:
            needed.append("production_access")
        for tag in needed:
            if not any(tag in {str(t) for t in t_.get("tags") or []} for t_ in tickets):
                out.append(
                    {
                        "app_access_id": grant["id"],
                        "employee_id": grant.get("employee_id"),
                        "missing_tag": tag,
                    }
                )
        if _truthy(grant.get("is_temporary")) and not any(t_.get("access_expiry_date") for t_ in tickets):
            out.append(
                {
                    "app_access_id": grant["id"],
                    "employee_id": grant.get("employee_id"),
                    "missing": "access_expiry_date",
                }
            )
    return out


def _notified(ctx: CheckContext, employee_ids: set[str]) -> bool:
    for note in _inserted(ctx, _MAIN + "email_notifications"):
        if note.get("recipient_id") in employee_ids:
            return True
        for email in note.get("cc_emails") or []:
            cc = _employee(ctx, email)
            if cc is not None and cc["id"] in employee_ids:
                return True
    return False


def incident_access_post_facto(ctx: CheckContext) -> list[dict[str, Any]]:
    """Production access granted while a SEV1/SEV2 incident is active is followed by notifications to
    the employee's manager and to IT Security."""
    if not ctx.query(_ACTIVE_SEV1_SEV2, {}):
        return []
    security = {
        r["id"]
        for r in ctx.query(
            "SELECT e.id"
            " FROM sandbox_neobank_support_main_models_employees AS e"
            " WHERE e.department = 'it_security'",
            {},
        )
    }
    out = []
    for grant in _inserted(ctx, OKTA_APPS):
        access = classify_access(grant.get("app_name"), grant.get("access_level"))
        if access is None or access[1] != 5 or access[0] == "splunk_siem":
            continue
        employee = _employee_by_id(ctx, grant.get("employee_id"))
        if employee is None:
            continue
        missing = []
        manager = _employee_by_id(ctx, employee.get("manager_id"))
        # the notification tool reaches only active or on-leave employees
        reachable = manager is not None and manager.get("employment_status") in {"active", "on_leave"}
        if reachable and not _notified(ctx, {str(manager["id"])}):
            missing.append("manager")
        if not _notified(ctx, security - {employee["id"]}):
            missing.append("IT Security")
        if missing:
            out.append({"app_access_id": grant["id"], "employee_id": employee["id"], "not_notified": missing})
    return out
