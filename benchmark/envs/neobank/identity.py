"""Identity and access tools: Okta groups and apps, Okta security actions, Workday, incidents.

Employees are found by exact e-mail (first match). Grants and memberships are never deleted, only
flagged inactive, so "active" always means ``is_active`` on the first matching row.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import ValidationError

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.neobank.common import (
    EMPLOYEES,
    INCIDENT_NOW,
    OKTA_APPS,
    OKTA_GROUPS,
    SECURITY_AUDIT,
    SECURITY_INCIDENTS,
    employee_by_email,
    next_id,
    value,
    without_none,
)
from benchmark.envs.neobank.inputs import (
    OktaApiAddToGroupInput,
    OktaApiCheckAccessInput,
    OktaApiGetUserGroupsInput,
    OktaApiProvisionAccessInput,
    OktaApiRevokeAccessInput,
    OktaSecurityApiExecuteActionInput,
    SecurityApiVerifyIncidentInput,
    WorkdayApiGetEmployeeInput,
    WorkdayApiGetManagerChainInput,
    WorkdayApiGetOrgStructureInput,
)
from benchmark.envs.neobank.rows import Employee, OktaAppAccess
from benchmark.envs.tools import ToolFn

MAX_BYPASS_HOURS = 4
MFA_DEVICE_OPERATIONS = ("add_mfa_device", "remove_mfa_device")
INCIDENT_WINDOW = dt.timedelta(hours=24)


def _employee(env: Environment, email: str, message: str = "Employee not found") -> Employee:
    employee = employee_by_email(env, email)
    if employee is None:
        raise ToolError(f"{message}: {email}")
    return employee


def _active_access(env: Environment, employee_id: str, app_name: str) -> list[OktaAppAccess]:
    return [a for a in env.table(OKTA_APPS).where(employee_id=employee_id, app_name=app_name) if a.is_active]


def okta_api_add_to_group(env: Environment, args: OktaApiAddToGroupInput) -> dict[str, Any]:
    """Refuses a second active membership of the same group; added_by is always "system"."""
    employee = _employee(env, args.email)
    table = env.table(OKTA_GROUPS)
    if any(m.is_active for m in table.where(employee_id=employee.id, group_name=args.group_name)):
        raise ToolError(f"Employee is already a member of this group: {args.group_name}")
    membership_id = next_id(table, "OGM")
    table.create(
        table.record(
            {
                "id": membership_id,
                "employee_id": employee.id,
                "group_name": args.group_name,
                "added_by": "system",
                "is_active": True,
            }
        )
    )
    return {"membership_id": membership_id}


def okta_api_check_access(env: Environment, args: OktaApiCheckAccessInput) -> dict[str, Any]:
    employee = _employee(env, args.email)
    active = _active_access(env, employee.id, args.app_name)
    if not active:
        return {"has_access": False}
    return {
        "has_access": True,
        "access_level": value(active[0].access_level),
        "granted_at": active[0].granted_at,
    }


def okta_api_get_user_groups(env: Environment, args: OktaApiGetUserGroupsInput) -> dict[str, Any]:
    employee = _employee(env, args.email)
    memberships = env.table(OKTA_GROUPS).where(employee_id=employee.id)
    return {
        "groups": [
            without_none({"group_name": m.group_name, "added_at": m.added_at})
            for m in memberships
            if m.is_active
        ]
    }


def okta_api_provision_access(env: Environment, args: OktaApiProvisionAccessInput) -> dict[str, Any]:
    """No role or approval checks: only a duplicate active grant of the same app is refused."""
    employee = _employee(env, args.email, "Employee not found in Okta directory")
    if _active_access(env, employee.id, args.app_name):
        raise ToolError(f"Employee already has access to this application: {args.app_name}")
    table = env.table(OKTA_APPS)
    access_id = next_id(table, "OAA")
    table.create(
        table.record(
            {
                "id": access_id,
                "employee_id": employee.id,
                "app_name": args.app_name,
                "access_level": value(args.access_level),
                "granted_by": "system",
                "is_active": True,
                "is_temporary": args.is_temporary,
                "expires_at": args.access_expiry_date,
            }
        )
    )
    return {"app_access_id": access_id}


def okta_api_revoke_access(env: Environment, args: OktaApiRevokeAccessInput) -> dict[str, Any]:
    """Flags the first active grant inactive; revoked_at stays unset as in the reference."""
    employee = _employee(env, args.email)
    active = _active_access(env, employee.id, args.app_name)
    if not active:
        raise ToolError(f"No active access found to revoke for application: {args.app_name}")
    env.table(OKTA_APPS).save(active[0].model_copy(update={"is_active": False}))
    return {"revoked": True}


def _security_failure(exc: Exception) -> ToolError:
    return ToolError(f"Failed to execute security action: {exc}")


def okta_security_api_execute_action(
    env: Environment, args: OktaSecurityApiExecuteActionInput
) -> dict[str, Any]:
    """Logs any operation as an audit row at the frozen instant; a bypass needs 1..4 hours."""
    employee = _employee(env, args.email, "Employee not found in Okta directory")
    operation = value(args.operation)
    if operation in MFA_DEVICE_OPERATIONS and not args.mfa_device_id:
        raise ToolError(f"mfa_device_id is required for {operation} operation")
    is_bypass = operation == "set_temporary_bypass"
    bypass_hours: int | None = None
    if is_bypass:
        bypass_hours = args.bypass_duration_hours
        if not bypass_hours:
            raise ToolError("bypass_duration_hours is required for set_temporary_bypass operation")
        if bypass_hours > MAX_BYPASS_HOURS:
            raise ToolError(f"bypass_duration_hours cannot exceed {MAX_BYPASS_HOURS} hours")
    table = env.table(SECURITY_AUDIT)
    audit_id = next_id(table, "OSA")
    expires_at: dt.datetime | None = None
    if bypass_hours is not None:  # a bypass (its hours were checked above)
        expires_at = INCIDENT_NOW + dt.timedelta(hours=bypass_hours)
    elif args.bypass_expires_at:
        try:
            dt.datetime.fromisoformat(args.bypass_expires_at.replace("Z", "+00:00"))
        except ValueError as exc:
            raise _security_failure(exc) from exc
    row: dict[str, Any] = {
        "id": audit_id,
        "employee_id": employee.id,
        "operation": operation,
        "performed_by": "system",
        "performed_at": INCIDENT_NOW,
        "reason": f"Security operation: {operation}",
        "ticket_id": args.ticket_id,
        "verification_method": None,
        "success": True,
    }
    if is_bypass:
        row["bypass_duration_hours"] = args.bypass_duration_hours
        row["bypass_expires_at"] = expires_at
    elif operation in MFA_DEVICE_OPERATIONS:
        row["mfa_device_id"] = args.mfa_device_id
    try:
        table.create(table.record(row))
    except (ValidationError, ToolError) as exc:
        raise _security_failure(exc) from exc
    return {"success": True, "audit_id": audit_id}


def _incident_failure(exc: Exception) -> ToolError:
    return ToolError(f"Failed to retrieve security incidents: {exc}")


def _iso(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def security_api_verify_incident(env: Environment, args: SecurityApiVerifyIncidentInput) -> dict[str, Any]:
    """Active incidents plus those resolved in the 24 h before the frozen instant, newest start first."""
    threshold = INCIDENT_NOW - INCIDENT_WINDOW
    matching = []
    for incident in env.table(SECURITY_INCIDENTS).all():
        if incident.is_active:
            matching.append(incident)
        elif incident.resolved_at:
            try:
                recent = incident.resolved_at >= threshold
            except TypeError as exc:
                raise _incident_failure(exc) from exc
            if recent:
                matching.append(incident)
    records = [
        without_none(
            {
                "incident_id": i.id,
                "severity": value(i.severity),
                "description": i.description,
                "started_at": _iso(i.reported_at),
                "is_active": i.is_active,
                "closed_at": _iso(i.resolved_at),
            }
        )
        for i in matching
    ]
    records.sort(key=lambda r: r["started_at"], reverse=True)
    return {"incidents": records}


def workday_api_get_employee(env: Environment, args: WorkdayApiGetEmployeeInput) -> dict[str, Any]:
    employee = _employee(env, args.email, "No employee found with the provided email")
    return {
        "employee_id": employee.id,
        "email": employee.email,
        "full_name": employee.full_name,
        "level": employee.level,
        "department": value(employee.department),
        "role": employee.role,
        "office_location": value(employee.office_location),
        "start_date": employee.start_date,
        "manager_id": employee.manager_id,
        "employment_status": value(employee.employment_status),
        "is_contractor": employee.is_contractor,
        "remote_delivery_address": employee.remote_delivery_address,
        "contract_end_date": employee.contract_end_date,
    }


def workday_api_get_manager_chain(env: Environment, args: WorkdayApiGetManagerChainInput) -> dict[str, Any]:
    """Follows manager_id upward until a missing manager; a cycle stops at the first repeat."""
    employee = _employee(env, args.email)
    employees = env.table(EMPLOYEES)
    chain = []
    seen: set[str] = set()
    manager_id = employee.manager_id
    while manager_id and manager_id not in seen:
        seen.add(manager_id)
        manager = employees.get(manager_id)
        if manager is None:
            break
        chain.append(
            {
                "employee_id": manager.id,
                "email": manager.email,
                "full_name": manager.full_name,
                "level": manager.level,
                "department": value(manager.department),
                "role": manager.role,
            }
        )
        manager_id = manager.manager_id
    return {"manager_chain": chain}


def workday_api_get_org_structure(env: Environment, args: WorkdayApiGetOrgStructureInput) -> dict[str, Any]:
    manager = _employee(env, args.manager_email, "Manager not found")
    reports = env.table(EMPLOYEES).where(manager_id=manager.id)
    return {
        "direct_reports": [
            {
                "employee_id": e.id,
                "email": e.email,
                "full_name": e.full_name,
                "level": e.level,
                "department": value(e.department),
                "role": e.role,
                "office_location": value(e.office_location),
                "employment_status": value(e.employment_status),
            }
            for e in reports
        ]
    }


TOOLS: dict[str, ToolFn] = {
    "okta_api_add_to_group": okta_api_add_to_group,
    "okta_api_check_access": okta_api_check_access,
    "okta_api_get_user_groups": okta_api_get_user_groups,
    "okta_api_provision_access": okta_api_provision_access,
    "okta_api_revoke_access": okta_api_revoke_access,
    "okta_security_api_execute_action": okta_security_api_execute_action,
    "security_api_verify_incident": security_api_verify_incident,
    "workday_api_get_employee": workday_api_get_employee,
    "workday_api_get_manager_chain": workday_api_get_manager_chain,
    "workday_api_get_org_structure": workday_api_get_org_structure,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "okta_api_check_access",
        "okta_api_get_user_groups",
        "security_api_verify_incident",
        "workday_api_get_employee",
        "workday_api_get_manager_chain",
        "workday_api_get_org_structure",
    }
)
