"""Hardware assets, procurement and software licence tools.

Device age is measured against the frozen instant 2025-12-17T10:00Z as whole 30-day "months", and
retirement stamps that instant (docs/benchmark.md#frozen-clocks). Assignments, allocations and orders store no
timestamp. New ids are ``len(table) + 1`` formatted per table (docs/benchmark.md#new-ids), so a clashing id
fails like the reference's ``create``. Employees are found by exact email; software by case-insensitive
name; the first match wins.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from pydantic import BaseModel, ValidationError

from benchmark.envs.environment import Environment
from benchmark.envs.errors import DataError, ToolError
from benchmark.envs.neobank.common import PROVISION_NOW, employee_by_email, value
from benchmark.envs.neobank.inputs import (
    AssetManagementApiAssignDeviceInput,
    AssetManagementApiCheckInventoryInput,
    AssetManagementApiGetDeviceDetailsInput,
    AssetManagementApiGetEmployeeDevicesInput,
    AssetManagementApiRetireDeviceInput,
    HardwareProcurementApiCreateOrderInput,
    LicenseManagementApiAllocateLicenseInput,
    LicenseManagementApiCheckAvailabilityInput,
    LicenseManagementApiCheckLicenseTypeInput,
)
from benchmark.envs.neobank.rows import (
    AssetAssignment,
    HardwareAsset,
    LicenseAllocation,
    ProcurementOrder,
    SoftwareLicense,
)
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

ASSETS: TableRef[HardwareAsset] = TableRef("sandbox_neobank_support_main_models_hardware_assets")
ASSIGNMENTS: TableRef[AssetAssignment] = TableRef("sandbox_neobank_support_main_models_asset_assignments")
ORDERS: TableRef[ProcurementOrder] = TableRef("sandbox_neobank_support_main_models_procurement_orders")
LICENSES: TableRef[SoftwareLicense] = TableRef("sandbox_neobank_support_main_models_software_licenses")
ALLOCATIONS: TableRef[LicenseAllocation] = TableRef("sandbox_neobank_support_main_models_license_allocations")

ASSET_NOW = PROVISION_NOW
RETIRED_AT = ASSET_NOW.strftime("%Y-%m-%dT%H:%M:%SZ")


class DeviceInfo(BaseModel):
    """One entry of ``get_employee_devices``; validated like the reference's output item.

    Assignments made by ``assign_device`` have no ``assigned_at``, which the reference's item model
    rejects, so listing such an employee's devices fails with pydantic's own message.
    """

    asset_id: str
    device_type: str
    device_model: str
    assigned_at: str
    condition: str
    age_months: int


def _enum_values(table: str, field: str, env: Environment) -> frozenset[str]:
    """The allowed values of an enum column, read from the table's row model."""
    annotation = env.table(table).spec.row_model.model_fields[field].annotation
    if not (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        raise DataError(f"{table}.{field}: not an enum column ({annotation!r})")
    return frozenset(m.value for m in annotation)


def _asset(env: Environment, asset_id: str) -> HardwareAsset:
    asset = env.table(ASSETS).get(asset_id)
    if asset is None:
        raise ToolError(f"Asset not found: {asset_id}")
    return asset


def _active_assignments(env: Environment, **equals: Any) -> list[AssetAssignment]:
    return [a for a in env.table(ASSIGNMENTS).where(**equals) if a.is_active]


def _age_months(asset: HardwareAsset) -> int:
    """Whole 30-day periods since purchase; a naive purchase date is taken as UTC."""
    raw = asset.purchase_date
    if not raw:
        raise ToolError(f"Invalid purchase_date for asset {asset.id}: {raw!r}")
    try:
        purchased = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolError(f"Invalid purchase_date for asset {asset.id}: {raw!r}") from exc
    if purchased.tzinfo is None:
        purchased = purchased.replace(tzinfo=dt.UTC)
    return int((ASSET_NOW - purchased).days / 30)


def _license(env: Environment, software_name: str) -> SoftwareLicense | None:
    wanted = software_name.lower()
    for pool in env.table(LICENSES).all():
        if pool.software_name.lower() == wanted:
            return pool
    return None


def _active_allocations(env: Environment, license_id: str) -> list[LicenseAllocation]:
    return [a for a in env.table(ALLOCATIONS).where(license_id=license_id) if a.is_active]


def asset_management_api_assign_device(
    env: Environment, args: AssetManagementApiAssignDeviceInput
) -> dict[str, Any]:
    """No unassign tool exists, so an assigned or retired asset is refused rather than reassigned."""
    employee = employee_by_email(env, args.email)
    if employee is None:
        raise ToolError(f"Employee not found: {args.email}")
    asset = _asset(env, args.asset_id)
    if asset.is_assigned:
        raise ToolError(f"Asset {args.asset_id} is already assigned")
    if value(asset.condition) == "retired":
        raise ToolError(f"Cannot assign retired asset: {args.asset_id}")
    assignments = env.table(ASSIGNMENTS)
    assignment_id = f"ASN-{assignments.count() + 1:08d}"
    assignments.create(
        assignments.record(
            {
                "id": assignment_id,
                "asset_id": asset.id,
                "employee_id": employee.id,
                "assigned_at": None,
                "assigned_by": "system",
                "is_active": True,
            }
        )
    )
    asset.is_assigned = True
    env.table(ASSETS).save(asset)
    return {"assignment_id": assignment_id, "asset_id": asset.id, "employee_id": employee.id}


def asset_management_api_check_inventory(
    env: Environment, args: AssetManagementApiCheckInventoryInput
) -> dict[str, Any]:
    """Retired devices are not counted; only unassigned new/good ones are available."""
    if args.device_type not in _enum_values(ASSETS, "device_type", env):
        raise ToolError(f"Invalid device type: {args.device_type}")
    if args.warehouse_location not in _enum_values(ASSETS, "warehouse_location", env):
        raise ToolError(f"Invalid warehouse location: {args.warehouse_location}")
    located = env.table(ASSETS).where(
        device_type=args.device_type, warehouse_location=args.warehouse_location
    )
    matching = [a for a in located if value(a.condition) != "retired"]
    available = [a for a in matching if not a.is_assigned and value(a.condition) in ("new", "good")]
    return {
        "device_type": args.device_type,
        "warehouse_location": args.warehouse_location,
        "available_count": len(available),
        "total_count": len(matching),
        "asset_ids": [{"device_model": a.device_model, "asset_id": a.id} for a in available],
    }


def asset_management_api_get_device_details(
    env: Environment, args: AssetManagementApiGetDeviceDetailsInput
) -> dict[str, Any]:
    """``assigned_to``: the first active assignment's employee, only when the asset is flagged assigned."""
    asset = _asset(env, args.asset_id)
    age = _age_months(asset)
    assigned_to = None
    if asset.is_assigned:
        active = _active_assignments(env, asset_id=asset.id)
        if active:
            assigned_to = active[0].employee_id
    return {
        "asset_id": asset.id,
        "device_type": value(asset.device_type),
        "device_model": asset.device_model,
        "purchase_date": asset.purchase_date,
        "age_months": age,
        "condition": value(asset.condition),
        "warehouse_location": value(asset.warehouse_location),
        "is_assigned": asset.is_assigned,
        "assigned_to": assigned_to,
    }


def asset_management_api_get_employee_devices(
    env: Environment, args: AssetManagementApiGetEmployeeDevicesInput
) -> dict[str, Any]:
    """Devices of the employee's active assignments, in assignment order; dangling asset ids are skipped."""
    employee = employee_by_email(env, args.email)
    if employee is None:
        raise ToolError(f"Employee not found: {args.email}")
    devices = []
    for assignment in _active_assignments(env, employee_id=employee.id):
        asset = env.table(ASSETS).get(assignment.asset_id)
        if asset is None:
            continue
        age = _age_months(asset)
        try:
            # assigned_at may be None (see DeviceInfo), so the data goes through validation as a dict.
            device = DeviceInfo.model_validate(
                {
                    "asset_id": asset.id,
                    "device_type": value(asset.device_type),
                    "device_model": asset.device_model,
                    "assigned_at": assignment.assigned_at,
                    "condition": value(asset.condition),
                    "age_months": age,
                }
            )
        except ValidationError as exc:
            raise ToolError(str(exc)) from exc
        devices.append(device.model_dump())
    return {"employee_id": employee.id, "devices": devices}


def asset_management_api_retire_device(
    env: Environment, args: AssetManagementApiRetireDeviceInput
) -> dict[str, Any]:
    """Retiring an assigned device also closes its active assignments (returned at the frozen instant)."""
    asset = _asset(env, args.asset_id)
    previous = value(asset.condition)
    if previous == "retired":
        raise ToolError(f"Asset {args.asset_id} is already retired")
    was_assigned = asset.is_assigned
    if was_assigned:
        assignments = env.table(ASSIGNMENTS)
        for assignment in _active_assignments(env, asset_id=asset.id):
            assignment.is_active = False
            assignment.returned_at = RETIRED_AT
            assignments.save(assignment)
    assets = env.table(ASSETS)
    retired = {**asset.model_dump(mode="json"), "condition": "retired", "is_assigned": False}
    assets.save(assets.record(retired))
    return {
        "asset_id": asset.id,
        "previous_condition": previous,
        "retired_at": RETIRED_AT,
        "was_assigned": was_assigned,
    }


def hardware_procurement_api_create_order(
    env: Environment, args: HardwareProcurementApiCreateOrderInput
) -> dict[str, Any]:
    """Only the requester is checked; the ticket id is stored unverified; the date is its first 10 chars."""
    requester = employee_by_email(env, args.requester_email)
    if requester is None:
        raise ToolError(f"Requester not found: {args.requester_email}")
    orders = env.table(ORDERS)
    order_id = f"HW-ORDER-{orders.count() + 1:07d}"
    try:
        expected = dt.date.fromisoformat(args.expected_delivery_date[:10])
    except ValueError as exc:
        message = f"Invalid expected_delivery_date format: {args.expected_delivery_date}."
        raise ToolError(f"{message} Expected YYYY-MM-DD format.") from exc
    orders.create(
        orders.record(
            {
                "id": order_id,
                "device_type": value(args.device_type),
                "device_model": args.device_model,
                "quantity": args.quantity,
                "ship_to_location": args.ship_to_location,
                "requester_id": requester.id,
                "ticket_id": args.ticket_id,
                "status": "pending",
                "created_at": None,
                "expected_delivery_date": expected,
            }
        )
    )
    return {"order_id": order_id, "status": "pending"}


def license_management_api_allocate_license(
    env: Environment, args: LicenseManagementApiAllocateLicenseInput
) -> dict[str, Any]:
    """No deallocate tool exists: refuse a second active seat and, for limited pools, an exhausted pool."""
    employee = employee_by_email(env, args.email)
    if employee is None:
        raise ToolError(f"Employee not found: {args.email}")
    pool = _license(env, args.software_name)
    if pool is None:
        raise ToolError(f"Software not found: {args.software_name}")
    active = _active_allocations(env, pool.id)
    if any(a.employee_id == employee.id for a in active):
        raise ToolError(f"Employee already has a license for this software: {args.software_name}")
    if value(pool.license_type) != "unlimited" and len(active) >= (pool.total_licenses or 0):
        raise ToolError("No licenses available in pool")
    allocations = env.table(ALLOCATIONS)
    allocation_id = f"LAL-{allocations.count() + 1:08d}"
    allocations.create(
        allocations.record(
            {
                "id": allocation_id,
                "license_id": pool.id,
                "employee_id": employee.id,
                "allocated_at": None,
                "allocated_by": "system",
                "is_active": True,
            }
        )
    )
    return {"allocation_id": allocation_id}


def license_management_api_check_availability(
    env: Environment, args: LicenseManagementApiCheckAvailabilityInput
) -> dict[str, Any]:
    """Unlimited pools report no counts; limited ones: total minus active allocations, never below 0."""
    pool = _license(env, args.software_name)
    if pool is None:
        raise ToolError(f"Software not found in license inventory: {args.software_name}")
    license_type = value(pool.license_type)
    if license_type == "unlimited":
        return {"available_licenses": None, "total_licenses": None, "license_type": license_type}
    total = pool.total_licenses or 0
    return {
        "available_licenses": max(0, total - len(_active_allocations(env, pool.id))),
        "total_licenses": total,
        "license_type": license_type,
    }


def license_management_api_check_license_type(
    env: Environment, args: LicenseManagementApiCheckLicenseTypeInput
) -> dict[str, Any]:
    pool = _license(env, args.software_name)
    if pool is None:
        raise ToolError(f"Software not found in license inventory: {args.software_name}")
    return {
        "license_type": value(pool.license_type),
        "license_id": pool.id,
        "annual_cost_per_license": pool.annual_cost_per_license,
    }


TOOLS: dict[str, ToolFn] = {
    "asset_management_api_assign_device": asset_management_api_assign_device,
    "asset_management_api_check_inventory": asset_management_api_check_inventory,
    "asset_management_api_get_device_details": asset_management_api_get_device_details,
    "asset_management_api_get_employee_devices": asset_management_api_get_employee_devices,
    "asset_management_api_retire_device": asset_management_api_retire_device,
    "hardware_procurement_api_create_order": hardware_procurement_api_create_order,
    "license_management_api_allocate_license": license_management_api_allocate_license,
    "license_management_api_check_availability": license_management_api_check_availability,
    "license_management_api_check_license_type": license_management_api_check_license_type,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "asset_management_api_check_inventory",
        "asset_management_api_get_device_details",
        "asset_management_api_get_employee_devices",
        "license_management_api_check_availability",
        "license_management_api_check_license_type",
    }
)
