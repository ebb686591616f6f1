"""Multi-action service tools: expenses (concur), assets, licences, training (degreed).

Every tool takes an ``action`` and the parameters that action needs; a missing one is reported at
run time. Writes never check foreign ids beyond what each action states.
"""

from __future__ import annotations

from typing import Any

from benchmark.envs.consulting.actions import compact, dispatch, free_id, given, iso, require, value
from benchmark.envs.consulting.inputs import (
    AssetManagementApiInput,
    ConcurApiInput,
    DegreedApiInput,
    LicenseManagementApiInput,
)
from benchmark.envs.consulting.rows import (
    Certification,
    Client,
    Device,
    DeviceAssignment,
    ExpenseReport,
    LicenseAllocation,
    LicensePoolRecord,
    SoftwareCatalog,
    TrainingCourse,
    TrainingEnrollment,
    TravelRequest,
)
from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.records import R, TableRef
from benchmark.envs.tools import ToolFn

EXPENSES: TableRef[ExpenseReport] = TableRef("concur_expense_reports")
TRAVEL: TableRef[TravelRequest] = TableRef("concur_travel_requests")
DEVICES: TableRef[Device] = TableRef("asset_management_devices")
ASSIGNMENTS: TableRef[DeviceAssignment] = TableRef("asset_management_device_assignments")
POOLS: TableRef[LicensePoolRecord] = TableRef("license_management_license_pool_record")
ALLOCATIONS: TableRef[LicenseAllocation] = TableRef("license_management_license_allocation")
CATALOG: TableRef[SoftwareCatalog] = TableRef("software_catalog_software_catalog")
COURSES: TableRef[TrainingCourse] = TableRef("degreed_training_courses")
ENROLLMENTS: TableRef[TrainingEnrollment] = TableRef("degreed_training_enrollments")
CERTIFICATIONS: TableRef[Certification] = TableRef("degreed_certifications")
CLIENTS: TableRef[Client] = TableRef("salesforce_crm_clients")

# Capacity the reference reports for a pool or course without a limit.
UNLIMITED = 99999


def _save(table: Table[R], record: R, **changes: Any) -> R:
    """Store ``record`` with ``changes`` applied, validated through the row model."""
    updated = table.record({**record.model_dump(), **changes})
    table.save(updated)
    return updated


def _found(table: Table[R], key: str, label: str) -> R:
    record = table.get(key)
    if record is None:
        raise ToolError(f"{label} not found: {key}")
    return record


# --- concur -------------------------------------------------------------------------------------


def _get_expense_report(env: Environment, args: ConcurApiInput) -> dict[str, Any]:
    require(args, "expense_report_id")
    report = _found(env.table(EXPENSES), given(args.expense_report_id), "Expense report")
    return {
        "expense_report": compact(
            {
                "id": report.id,
                "employee_email": report.employee_email,
                "amount": report.amount,
                "category": value(report.category),
                "trip_location_city": report.trip_location_city,
                "trip_location_state": report.trip_location_state,
                "expense_date": iso(report.expense_date),
                "receipt_status": value(report.receipt_status),
                "rejection_reason": report.rejection_reason,
                "override_approved": report.override_approved,
                "override_approved_by": report.override_approved_by,
                "override_reason": value(report.override_reason),
            }
        )
    }


def _override_expense_rejection(env: Environment, args: ConcurApiInput) -> dict[str, Any]:
    """Approve the override; the rejection reason stays and the approver is not checked."""
    require(args, "expense_report_id", "override_reason", "approver_email")
    table = env.table(EXPENSES)
    report = _found(table, given(args.expense_report_id), "Expense report")
    _save(
        table,
        report,
        override_approved=True,
        override_approved_by=args.approver_email,
        override_reason=value(args.override_reason),
    )
    return {"success": True}


def _get_travel_booking(env: Environment, args: ConcurApiInput) -> dict[str, Any]:
    require(args, "booking_id")
    booking = _found(env.table(TRAVEL), given(args.booking_id), "Travel booking")
    return {
        "travel_booking": compact(
            {
                "id": booking.id,
                "employee_email": booking.employee_email,
                "destination": booking.destination,
                "departure_date": iso(booking.departure_date),
                "return_date": iso(booking.return_date),
                "flight_class": value(booking.flight_class),
                "hotel_rate_per_night": booking.hotel_rate_per_night,
            }
        )
    }


def concur_api(env: Environment, args: ConcurApiInput) -> dict[str, Any]:
    return dispatch(
        {
            "get_expense_report": _get_expense_report,
            "override_expense_rejection": _override_expense_rejection,
            "get_travel_booking": _get_travel_booking,
        },
        env,
        args,
    )


# --- asset management ---------------------------------------------------------------------------


def _matching_available(env: Environment, args: AssetManagementApiInput) -> list[Device]:
    """Available devices of the requested type at the requested office, in store order."""
    return [
        d
        for d in env.table(DEVICES).all()
        if value(d.device_type) == value(args.device_type)
        and value(d.location) == value(args.location)
        and value(d.inventory_status) == "available"
    ]


def _get_employee_devices(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    """Assignments of the employee not yet returned; an unknown employee has none."""
    require(args, "email")
    devices = [
        compact(
            {
                "id": a.id,
                "asset_id": a.asset_id,
                "employee_email": a.employee_email,
                "returned_at": iso(a.returned_at),
            }
        )
        for a in env.table(ASSIGNMENTS).all()
        if a.employee_email == args.email and a.returned_at is None
    ]
    return {"devices": devices}


def _get_device_details(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    require(args, "asset_id")
    device = _found(env.table(DEVICES), given(args.asset_id), "Device")
    return {
        "device_data": {
            "id": device.id,
            "device_type": value(device.device_type),
            "model": device.model,
            "age_months": device.age_months,
            "inventory_status": value(device.inventory_status),
            "location": value(device.location),
        }
    }


def _check_inventory(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    require(args, "device_type", "location")
    counts: dict[str, int] = {}
    for device in _matching_available(env, args):
        counts[device.model] = counts.get(device.model, 0) + 1
    return {"available_count_by_model": counts}


def _reserve_device(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    """Reserve the available device with the lowest asset id."""
    require(args, "device_type", "location")
    available = _matching_available(env, args)
    if not available:
        raise ToolError(f"No available {value(args.device_type)} devices at {value(args.location)}")
    device = min(available, key=lambda d: d.id)
    _save(env.table(DEVICES), device, inventory_status="reserved")
    return {"reserved_asset_id": device.id}


def _assign_device(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    """Record the assignment and mark the device assigned, whatever its current status."""
    require(args, "email", "asset_id")
    devices = env.table(DEVICES)
    device = _found(devices, given(args.asset_id), "Device")
    assignments = env.table(ASSIGNMENTS)
    assignments.create(
        assignments.record(
            {
                "id": free_id(assignments, "ASMT-2"),
                "asset_id": args.asset_id,
                "employee_email": args.email,
                "returned_at": None,
            }
        )
    )
    _save(devices, device, inventory_status="assigned")
    return {"success": True}


def _retire_device(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    require(args, "asset_id")
    devices = env.table(DEVICES)
    _save(devices, _found(devices, given(args.asset_id), "Device"), inventory_status="retired")
    return {"success": True}


def asset_management_api(env: Environment, args: AssetManagementApiInput) -> dict[str, Any]:
    return dispatch(
        {
            "get_employee_devices": _get_employee_devices,
            "get_device_details": _get_device_details,
            "check_inventory": _check_inventory,
            "reserve_device": _reserve_device,
            "assign_device": _assign_device,
            "retire_device": _retire_device,
        },
        env,
        args,
    )


# --- licence management -------------------------------------------------------------------------


def _check_availability(env: Environment, args: LicenseManagementApiInput) -> dict[str, Any]:
    """Pool size minus active allocations; a pool without a size is unlimited."""
    require(args, "catalog_id", "pool_type")
    pool_type = value(args.pool_type)
    pool = next(
        (
            p
            for p in env.table(POOLS).all()
            if p.catalog_id == args.catalog_id and value(p.pool_type) == pool_type
        ),
        None,
    )
    if pool is None:
        raise ToolError(f"License pool not found for catalog_id={args.catalog_id}, pool_type={pool_type}")
    if pool.total_licenses is None:
        return {"available_count": UNLIMITED}
    active = sum(
        1
        for a in env.table(ALLOCATIONS).all()
        if a.catalog_id == args.catalog_id and value(a.pool_type) == pool_type and a.deallocated_at is None
    )
    return {"available_count": pool.total_licenses - active}


def _allocate(env: Environment, args: LicenseManagementApiInput) -> dict[str, Any]:
    """Record an allocation; neither capacity nor the catalogue entry is checked."""
    require(args, "catalog_id", "email", "pool_type")
    table = env.table(ALLOCATIONS)
    table.create(
        table.record(
            {
                "id": free_id(table, "LIC-2"),
                "catalog_id": args.catalog_id,
                "employee_email": args.email,
                "engagement_code": args.engagement_code,
                "pool_type": value(args.pool_type),
                "deallocated_at": None,
            }
        )
    )
    return {"success": True}


def _get_cost(env: Environment, args: LicenseManagementApiInput) -> dict[str, Any]:
    require(args, "catalog_id")
    software = _found(env.table(CATALOG), given(args.catalog_id), "Software catalog entry")
    return {"annual_cost": software.annual_cost}


def license_management_api(env: Environment, args: LicenseManagementApiInput) -> dict[str, Any]:
    return dispatch(
        {
            "check_availability": _check_availability,
            "allocate": _allocate,
            "get_cost": _get_cost,
        },
        env,
        args,
    )


# --- degreed ------------------------------------------------------------------------------------


def _course(course: TrainingCourse) -> dict[str, Any]:
    return compact(
        {
            "id": course.id,
            "title": course.title,
            "cost": course.cost,
            "training_category": value(course.training_category),
            "max_seats": course.max_seats,
            "start_date": iso(course.start_date),
            "end_date": iso(course.end_date),
            "prerequisites": list(course.prerequisites),
        }
    )


def _search_courses(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    """Case-insensitive substring match on the title, optionally narrowed to one category."""
    require(args, "keyword")
    keyword = given(args.keyword).lower()
    courses = [c for c in env.table(COURSES).all() if keyword in c.title.lower()]
    if args.category:
        courses = [c for c in courses if value(c.training_category) == value(args.category)]
    return {"courses": [_course(c) for c in courses]}


def _get_course_details(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    require(args, "course_id")
    return {"course_data": _course(_found(env.table(COURSES), given(args.course_id), "Course"))}


def _check_enrollment(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    """Seats minus enrollments not yet completed; a course without a seat limit is unlimited."""
    require(args, "course_id")
    course = _found(env.table(COURSES), given(args.course_id), "Course")
    if course.max_seats is None:
        return {"available_seats": UNLIMITED}
    active = sum(
        1 for e in env.table(ENROLLMENTS).all() if e.course_id == args.course_id and e.completion_date is None
    )
    return {"available_seats": course.max_seats - active}


def _enroll_employee(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    """Enroll without checking seats, prerequisites or duplicates; only the course must exist."""
    require(args, "email", "course_id")
    _found(env.table(COURSES), given(args.course_id), "Course")
    table = env.table(ENROLLMENTS)
    table.create(
        table.record(
            {
                "id": free_id(table, "ENR-2"),
                "employee_email": args.email,
                "course_id": args.course_id,
                "completion_date": None,
            }
        )
    )
    return {"success": True}


def _get_training_history(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    require(args, "email")
    completed = [
        {"course_id": e.course_id}
        for e in env.table(ENROLLMENTS).all()
        if e.employee_email == args.email and e.completion_date is not None
    ]
    certifications = [
        compact(
            {
                "id": c.id,
                "employee_email": c.employee_email,
                "certification_name": c.certification_name,
                "issued_date": iso(c.issued_date),
                "expiry_date": iso(c.expiry_date),
            }
        )
        for c in env.table(CERTIFICATIONS).all()
        if c.employee_email == args.email
    ]
    return {"completed_trainings": completed, "certifications": certifications}


def _check_certification_status(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    """Any certification of that name (case-insensitive), expired or not."""
    require(args, "email", "certification_name")
    wanted = given(args.certification_name).lower()
    has = any(
        c.employee_email == args.email and c.certification_name.lower() == wanted
        for c in env.table(CERTIFICATIONS).all()
    )
    return {"has_certification": has}


def _get_required_trainings(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    require(args, "client_id")
    client = _found(env.table(CLIENTS), given(args.client_id), "Client")
    return {"required_courses": list(client.required_training_courses)}


def degreed_api(env: Environment, args: DegreedApiInput) -> dict[str, Any]:
    return dispatch(
        {
            "search_courses": _search_courses,
            "get_course_details": _get_course_details,
            "check_enrollment": _check_enrollment,
            "enroll_employee": _enroll_employee,
            "get_training_history": _get_training_history,
            "check_certification_status": _check_certification_status,
            "get_required_trainings": _get_required_trainings,
        },
        env,
        args,
    )


TOOLS: dict[str, ToolFn] = {
    "concur_api": concur_api,
    "asset_management_api": asset_management_api,
    "license_management_api": license_management_api,
    "degreed_api": degreed_api,
}

# Every tool here has at least one writing action.
READ_ONLY: frozenset[str] = frozenset()
