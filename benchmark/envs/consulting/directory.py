"""Catalogue, CRM, directory, access, approval and procurement tools (single-purpose).

Outputs format datetimes with ``isoformat()`` (``+00:00`` or naive) as the reference's output models
do, and drop ``None`` fields at every level (the reference's nested output models are dumped with
``exclude_none``). Created ids are ``<PFX>-2-{n:06d}`` with the first free ``n`` from 0.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable
from typing import Any

from benchmark.envs.consulting.actions import free_id
from benchmark.envs.consulting.inputs import (
    ApprovalCreateRequestInput,
    ApprovalGetStatusInput,
    ApproverLookupGetContactInput,
    HardwareProcurementCreateOrderInput,
    MavenlinkApiInput,
    OktaProvisionAccessInput,
    SalesforceCrmCheckEmployeeAssignmentInput,
    SalesforceCrmGetEngagementInput,
    SoftwareCatalogGetDetailsInput,
    SoftwareCatalogSearchInput,
    WorkdayApiInput,
)
from benchmark.envs.consulting.rows import (
    ApplicationAccessLog,
    ApprovalRequest,
    Employee,
    EmployeeAssignment,
    MvEngagement,
    SfEngagement,
    SoftwareCatalog,
)
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import Record, TableRef
from benchmark.envs.tools import ToolFn

CATALOG: TableRef[SoftwareCatalog] = TableRef("software_catalog_software_catalog")
SF_ENGAGEMENTS: TableRef[SfEngagement] = TableRef("salesforce_crm_sf_engagements")
EMPLOYEES: TableRef[Employee] = TableRef("workday_employees")
ACCESS_LOGS: TableRef[ApplicationAccessLog] = TableRef("okta_application_access_logs")
ASSIGNMENTS: TableRef[EmployeeAssignment] = TableRef("mavenlink_employee_assignments")
MV_ENGAGEMENTS: TableRef[MvEngagement] = TableRef("mavenlink_mv_engagements")
APPROVALS: TableRef[ApprovalRequest] = TableRef("approval_approval_requests")

# The reference's procurement tool answers with one constant order id and records nothing.
HARDWARE_ORDER_ID = "HWO-0056435"


def _out(value: Any) -> Any:
    """A stored value as the reference's output models render it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def _pick(record: Record, fields: Iterable[str]) -> dict[str, Any]:
    """The given fields of a record in output form, without the ``None`` ones."""
    out = {name: _out(getattr(record, name)) for name in fields}
    return {k: v for k, v in out.items() if v is not None}


def _catalog_item(software: SoftwareCatalog) -> dict[str, Any]:
    return _pick(software, ("id", "name", "annual_cost", "pool_type"))


def _employee(env: Environment, email: str) -> Employee | None:
    found = env.table(EMPLOYEES).where(email=email)
    return found[0] if found else None


def _require(value: str | None, name: str) -> str:
    """The multi-action tools check their per-action parameters themselves."""
    if not value:
        raise ToolError(f"Missing required parameter: {name}")
    return value


def software_catalog_get_details(env: Environment, args: SoftwareCatalogGetDetailsInput) -> dict[str, Any]:
    found = env.table(CATALOG).where(id=args.catalog_id)
    if not found:
        raise ToolError(f"Software not found in catalog: {args.catalog_id}")
    return _catalog_item(found[0])


def software_catalog_search(env: Environment, args: SoftwareCatalogSearchInput) -> dict[str, Any]:
    """Case-insensitive substring match on the name, in catalogue order."""
    term = args.software_name.lower()
    results = [_catalog_item(s) for s in env.table(CATALOG).all() if term in s.name.lower()]
    if not results:
        raise ToolError(f"No matching software found in catalog for: {args.software_name}")
    return {"results": results}


def salesforce_crm_check_employee_assignment(
    env: Environment, args: SalesforceCrmCheckEmployeeAssignmentInput
) -> dict[str, Any]:
    """An unknown pair is an answer (``assigned: false``), not an error."""
    found = env.table(ASSIGNMENTS).where(employee_email=args.email, engagement_code=args.engagement_code)
    if not found:
        return {"assigned": False}
    return {"assigned": True, **_pick(found[0], ("assignment_status", "start_date", "end_date"))}


def salesforce_crm_get_engagement(env: Environment, args: SalesforceCrmGetEngagementInput) -> dict[str, Any]:
    found = env.table(SF_ENGAGEMENTS).where(engagement_code=args.engagement_code)
    if not found:
        raise ToolError(f"Engagement not found: {args.engagement_code}")
    return _pick(
        found[0],
        ("engagement_code", "client_id", "engagement_manager_email", "status", "start_date", "end_date"),
    )


def workday_api(env: Environment, args: WorkdayApiInput) -> dict[str, Any]:
    """Single action ``get_employee``: the whole employee row."""
    email = _require(args.email, "email")
    employee = _employee(env, email)
    if employee is None:
        raise ToolError(f"Employee not found: {email}")
    return {"employee_data": _pick(employee, env.table(EMPLOYEES).spec.field_names)}


def okta_provision_access(env: Environment, args: OktaProvisionAccessInput) -> dict[str, Any]:
    """Appends an access log row without any check; access type defaults to full access."""
    logs = env.table(ACCESS_LOGS)
    access_type = args.access_type.value if args.access_type is not None else "full_access"
    logs.create(
        logs.record(
            {
                "id": free_id(logs, "AAL-2"),
                "employee_email": args.email,
                "app_name": args.app_name,
                "access_type": access_type,
            }
        )
    )
    return {"success": True}


def mavenlink_api(env: Environment, args: MavenlinkApiInput) -> dict[str, Any]:
    action = args.action.value
    if action == "get_engagement":
        code = _require(args.engagement_code, "engagement_code")
        found = env.table(MV_ENGAGEMENTS).where(engagement_code=code)
        if not found:
            raise ToolError(f"Engagement not found: {code}")
        return {"engagement_data": _pick(found[0], env.table(MV_ENGAGEMENTS).spec.field_names)}
    if action == "get_employee_assignments":
        email = _require(args.email, "email")
        fields = ("engagement_code", "assignment_status", "start_date", "end_date", "senior_manager_email")
        rows = env.table(ASSIGNMENTS).where(employee_email=email)
        return {"assignments": [_pick(row, fields) for row in rows]}
    code = _require(args.engagement_code, "engagement_code")
    return {"valid": bool(env.table(MV_ENGAGEMENTS).where(engagement_code=code))}


def approval_create_request(env: Environment, args: ApprovalCreateRequestInput) -> dict[str, Any]:
    """A pending request with whatever emails and codes were given (no validation)."""
    requests = env.table(APPROVALS)
    approval_id = free_id(requests, "APR-2")
    requests.create(
        requests.record(
            {
                "id": approval_id,
                "request_type": args.request_type.value,
                "requester_email": args.requester_email,
                "approver_email": args.approver_email,
                "amount": args.amount,
                "engagement_code": args.engagement_code,
                "status": "pending",
            }
        )
    )
    return {"approval_id": approval_id}


def approval_get_status(env: Environment, args: ApprovalGetStatusInput) -> dict[str, Any]:
    """Matching requests in store order; none gives one placeholder ``NOT_FOUND`` result."""
    request_type = args.request_type.value
    matches = env.table(APPROVALS).where(request_type=request_type, requester_email=args.requester_email)
    if args.engagement_code is not None:
        matches = [m for m in matches if m.engagement_code == args.engagement_code]
    if args.approver_email is not None:
        matches = [m for m in matches if m.approver_email == args.approver_email]
    if not matches:
        placeholder = {
            "approval_id": "NOT_FOUND",
            "status": "not_found",
            "request_type": request_type,
            "approver_email": args.approver_email or "",
            "engagement_code": args.engagement_code,
        }
        return {"results": [{k: v for k, v in placeholder.items() if v is not None}]}
    results = []
    for m in matches:
        item = {
            "approval_id": m.id,
            **_pick(m, ("status", "request_type", "approver_email", "engagement_code")),
        }
        results.append(item)
    return {"results": results}


def approver_lookup_get_contact(env: Environment, args: ApproverLookupGetContactInput) -> dict[str, Any]:
    employee = _employee(env, args.email)
    if employee is None:
        raise ToolError(f"Approver not found: {args.email}")
    return _pick(employee, ("email", "name", "availability_status", "backup_approver_email"))


def hardware_procurement_create_order(
    env: Environment, args: HardwareProcurementCreateOrderInput
) -> dict[str, Any]:
    return {"order_id": HARDWARE_ORDER_ID}


TOOLS: dict[str, ToolFn] = {
    "software_catalog_get_details": software_catalog_get_details,
    "software_catalog_search": software_catalog_search,
    "salesforce_crm_check_employee_assignment": salesforce_crm_check_employee_assignment,
    "salesforce_crm_get_engagement": salesforce_crm_get_engagement,
    "workday_api": workday_api,
    "okta_provision_access": okta_provision_access,
    "mavenlink_api": mavenlink_api,
    "approval_create_request": approval_create_request,
    "approval_get_status": approval_get_status,
    "approver_lookup_get_contact": approver_lookup_get_contact,
    "hardware_procurement_create_order": hardware_procurement_create_order,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "software_catalog_get_details",
        "software_catalog_search",
        "salesforce_crm_check_employee_assignment",
        "salesforce_crm_get_engagement",
        "workday_api",
        "mavenlink_api",
        "approval_get_status",
        "approver_lookup_get_contact",
        "hardware_procurement_create_order",
    }
)
