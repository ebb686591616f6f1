"""Consulting multi-action service tools (concur, assets, licences, degreed) on a real Environment."""

from __future__ import annotations

from typing import Any

from benchmark.envs import Environment
from tests.support.envs import call, error_of, record, records

DOMAIN = "sandbox_consulting"
EXPENSES = "concur_expense_reports"
TRAVEL = "concur_travel_requests"
DEVICES = "asset_management_devices"
ASSIGNMENTS = "asset_management_device_assignments"
POOLS = "license_management_license_pool_record"
ALLOCATIONS = "license_management_license_allocation"
CATALOG = "software_catalog_software_catalog"
COURSES = "degreed_training_courses"
ENROLLMENTS = "degreed_training_enrollments"
CERTIFICATIONS = "degreed_certifications"
CLIENTS = "salesforce_crm_clients"


def _device(asset_id: str, model: str, status: str, device_type: str = "phone") -> dict[str, Any]:
    return {
        "id": asset_id,
        "device_type": device_type,
        "model": model,
        "age_months": 3,
        "inventory_status": status,
        "location": "Austin",
    }


# --- concur -------------------------------------------------------------------------------------


def test_concur_get_expense_report_drops_nulls_and_keeps_naive_dates(env: Environment) -> None:
    env.apply_patch(
        {
            EXPENSES: [
                {
                    "id": "EXP-T1",
                    "employee_email": "a@msg.com",
                    "amount": 120,
                    "category": "meals",
                    "expense_date": "2025-09-16",
                    "receipt_status": "itemized",
                    "rejection_reason": "Exceeds daily per diem limit",
                }
            ]
        }
    )
    out = call(env, "concur_api", {"action": "get_expense_report", "expense_report_id": "EXP-T1"})
    assert out == {
        "expense_report": {
            "id": "EXP-T1",
            "employee_email": "a@msg.com",
            "amount": 120,
            "category": "meals",
            "expense_date": "2025-09-16T00:00:00",
            "receipt_status": "itemized",
            "rejection_reason": "Exceeds daily per diem limit",
            "override_approved": False,
        }
    }


def test_concur_override_sets_approval_and_keeps_rejection(env: Environment) -> None:
    report = records(env, EXPENSES)[0]
    args = {
        "action": "override_expense_rejection",
        "expense_report_id": report["id"],
        "override_reason": "system_error",
        "approver_email": "boss@msg.com",
    }
    assert call(env, "concur_api", args) == {"success": True}
    row = record(env, EXPENSES, report["id"])
    assert row["override_approved"] is True
    assert row["override_approved_by"] == "boss@msg.com"
    assert row["override_reason"].value == "system_error"
    assert row["rejection_reason"] == report["rejection_reason"]


def test_concur_errors(env: Environment) -> None:
    assert error_of(
        env, "concur_api", {"action": "override_expense_rejection", "expense_report_id": "X"}
    ) == ("Tool execution failed: Missing required parameter: override_reason")
    assert error_of(env, "concur_api", {"action": "get_expense_report", "expense_report_id": "NOPE"}) == (
        "Tool execution failed: Expense report not found: NOPE"
    )
    assert error_of(env, "concur_api", {"action": "get_travel_booking", "booking_id": ""}) == (
        "Tool execution failed: Missing required parameter: booking_id"
    )


def test_concur_get_travel_booking_renders_aware_dates_with_offset(env: Environment) -> None:
    env.apply_patch(
        {
            TRAVEL: [
                {
                    "id": "TRV-T1",
                    "employee_email": "a@msg.com",
                    "destination": "London",
                    "departure_date": "2025-10-04T09:00:00Z",
                    "return_date": "2025-10-08T18:00:00Z",
                }
            ]
        }
    )
    out = call(env, "concur_api", {"action": "get_travel_booking", "booking_id": "TRV-T1"})
    assert out["travel_booking"] == {
        "id": "TRV-T1",
        "employee_email": "a@msg.com",
        "destination": "London",
        "departure_date": "2025-10-04T09:00:00+00:00",
        "return_date": "2025-10-08T18:00:00+00:00",
        "flight_class": "economy",
    }


# --- asset management ---------------------------------------------------------------------------


def _only_test_devices(env: Environment, *devices: dict[str, Any]) -> None:
    """Retire every default device, then add ``devices``, so inventory answers depend on them alone."""
    retired = [{**d.model_dump(mode="json"), "inventory_status": "retired"} for d in env.table(DEVICES).all()]
    env.apply_patch({DEVICES: [*retired, *devices]})


def test_assets_inventory_reserve_assign_retire(env: Environment) -> None:
    _only_test_devices(
        env,
        _device("ZZT-3", "Pixel 9", "available"),
        _device("ZZT-1", "Pixel 9", "available"),
        _device("ZZT-2", "iPhone 16", "available"),
        _device("ZZT-4", "iPhone 16", "assigned"),
    )
    inventory = {"action": "check_inventory", "device_type": "phone", "location": "Austin"}
    assert call(env, "asset_management_api", inventory) == {
        "available_count_by_model": {"Pixel 9": 2, "iPhone 16": 1}
    }

    reserve = {"action": "reserve_device", "device_type": "phone", "location": "Austin"}
    assert call(env, "asset_management_api", reserve) == {"reserved_asset_id": "ZZT-1"}
    assert record(env, DEVICES, "ZZT-1")["inventory_status"].value == "reserved"
    assert call(env, "asset_management_api", inventory) == {
        "available_count_by_model": {"Pixel 9": 1, "iPhone 16": 1}
    }

    assign = {"action": "assign_device", "email": "n@msg.com", "asset_id": "ZZT-1"}
    assert call(env, "asset_management_api", assign) == {"success": True}
    assignment = record(env, ASSIGNMENTS, "ASMT-2-000000")
    assert (assignment["asset_id"], assignment["employee_email"], assignment["returned_at"]) == (
        "ZZT-1",
        "n@msg.com",
        None,
    )
    assert record(env, DEVICES, "ZZT-1")["inventory_status"].value == "assigned"
    devices = call(env, "asset_management_api", {"action": "get_employee_devices", "email": "n@msg.com"})
    assert devices == {
        "devices": [{"id": "ASMT-2-000000", "asset_id": "ZZT-1", "employee_email": "n@msg.com"}]
    }

    assert call(env, "asset_management_api", {"action": "retire_device", "asset_id": "ZZT-4"}) == {
        "success": True
    }
    details = call(env, "asset_management_api", {"action": "get_device_details", "asset_id": "ZZT-4"})
    assert details == {
        "device_data": {
            "id": "ZZT-4",
            "device_type": "phone",
            "model": "iPhone 16",
            "age_months": 3,
            "inventory_status": "retired",
            "location": "Austin",
        }
    }


def test_assets_errors(env: Environment) -> None:
    assert error_of(env, "asset_management_api", {"action": "check_inventory", "device_type": "laptop"}) == (
        "Tool execution failed: Missing required parameter: location"
    )
    assign = {"action": "assign_device", "email": "a@msg.com", "asset_id": "NOPE"}
    assert error_of(env, "asset_management_api", assign) == "Tool execution failed: Device not found: NOPE"
    assert not env.table(ASSIGNMENTS).exists("ASMT-2-000000")
    _only_test_devices(env)
    reserve = {"action": "reserve_device", "device_type": "headset", "location": "Austin"}
    assert error_of(env, "asset_management_api", reserve) == (
        "Tool execution failed: No available headset devices at Austin"
    )


# --- licence management -------------------------------------------------------------------------


def test_license_availability_allocate_cost(env: Environment) -> None:
    env.apply_patch(
        {
            CATALOG: [{"id": "CAT-T1", "name": "Tool", "annual_cost": 480, "pool_type": "standard"}],
            POOLS: [
                {"catalog_id": "CAT-T1", "pool_type": "standard", "total_licenses": 2},
                {"catalog_id": "CAT-T1", "pool_type": "enterprise", "total_licenses": None},
            ],
        }
    )
    check = {"action": "check_availability", "catalog_id": "CAT-T1", "pool_type": "standard"}
    assert call(env, "license_management_api", check) == {"available_count": 2}
    allocate = {"action": "allocate", "catalog_id": "CAT-T1", "email": "a@msg.com", "pool_type": "standard"}
    assert call(env, "license_management_api", allocate) == {"success": True}
    row = record(env, ALLOCATIONS, "LIC-2-000000")
    assert (row["catalog_id"], row["employee_email"], row["pool_type"].value, row["engagement_code"]) == (
        "CAT-T1",
        "a@msg.com",
        "standard",
        None,
    )
    assert call(env, "license_management_api", check) == {"available_count": 1}
    assert call(env, "license_management_api", {**allocate, "email": "b@msg.com"}) == {"success": True}
    assert env.table(ALLOCATIONS).exists("LIC-2-000001")
    unlimited = {**check, "pool_type": "enterprise"}
    assert call(env, "license_management_api", unlimited) == {"available_count": 99999}
    assert call(env, "license_management_api", {"action": "get_cost", "catalog_id": "CAT-T1"}) == {
        "annual_cost": 480
    }


def test_license_errors(env: Environment) -> None:
    assert error_of(env, "license_management_api", {"action": "allocate", "catalog_id": "C"}) == (
        "Tool execution failed: Missing required parameter: email"
    )
    missing = {"action": "check_availability", "catalog_id": "NOPE", "pool_type": "enterprise"}
    assert error_of(env, "license_management_api", missing) == (
        "Tool execution failed: License pool not found for catalog_id=NOPE, pool_type=enterprise"
    )
    assert error_of(env, "license_management_api", {"action": "get_cost", "catalog_id": "NOPE"}) == (
        "Tool execution failed: Software catalog entry not found: NOPE"
    )


# --- degreed ------------------------------------------------------------------------------------


def _degreed_rows(env: Environment) -> None:
    env.apply_patch(
        {
            COURSES: [
                {
                    "id": "CRS-T1",
                    "title": "Zeta Security Basics",
                    "cost": 0,
                    "training_category": "must_have",
                    "max_seats": 3,
                    "start_date": "2025-08-01",
                    "prerequisites": ["CRS-T0"],
                },
                {
                    "id": "CRS-T2",
                    "title": "Zeta security summit",
                    "cost": 900,
                    "training_category": "conference",
                },
            ],
            ENROLLMENTS: [
                {
                    "id": "ENR-T1",
                    "employee_email": "t@msg.com",
                    "course_id": "CRS-T1",
                    "completion_date": None,
                },
                {
                    "id": "ENR-T2",
                    "employee_email": "t@msg.com",
                    "course_id": "CRS-T2",
                    "completion_date": "2025-07-01",
                },
            ],
            CERTIFICATIONS: [
                {
                    "id": "CERT-T1",
                    "employee_email": "t@msg.com",
                    "certification_name": "HIPAA",
                    "issued_date": "2024-01-01T00:00:00Z",
                }
            ],
            CLIENTS: [{"id": "CLT-T1", "name": "Client", "required_training_courses": ["CRS-T1"]}],
        }
    )


def test_degreed_reads(env: Environment) -> None:
    _degreed_rows(env)
    found = call(env, "degreed_api", {"action": "search_courses", "keyword": "zeta SECURITY"})
    assert [c["id"] for c in found["courses"]] == ["CRS-T1", "CRS-T2"]
    assert found["courses"][1] == {
        "id": "CRS-T2",
        "title": "Zeta security summit",
        "cost": 900,
        "training_category": "conference",
        "prerequisites": [],
    }
    narrowed = call(
        env, "degreed_api", {"action": "search_courses", "keyword": "zeta", "category": "must_have"}
    )
    assert narrowed["courses"] == [
        {
            "id": "CRS-T1",
            "title": "Zeta Security Basics",
            "cost": 0,
            "training_category": "must_have",
            "max_seats": 3,
            "start_date": "2025-08-01T00:00:00",
            "prerequisites": ["CRS-T0"],
        }
    ]
    assert call(env, "degreed_api", {"action": "check_enrollment", "course_id": "CRS-T1"}) == {
        "available_seats": 2
    }
    assert call(env, "degreed_api", {"action": "check_enrollment", "course_id": "CRS-T2"}) == {
        "available_seats": 99999
    }
    history = call(env, "degreed_api", {"action": "get_training_history", "email": "t@msg.com"})
    assert history == {
        "completed_trainings": [{"course_id": "CRS-T2"}],
        "certifications": [
            {
                "id": "CERT-T1",
                "employee_email": "t@msg.com",
                "certification_name": "HIPAA",
                "issued_date": "2024-01-01T00:00:00+00:00",
            }
        ],
    }
    cert = {"action": "check_certification_status", "email": "t@msg.com", "certification_name": "hipaa"}
    assert call(env, "degreed_api", cert) == {"has_certification": True}
    assert call(env, "degreed_api", {**cert, "email": "x@msg.com"}) == {"has_certification": False}
    assert call(env, "degreed_api", {"action": "get_required_trainings", "client_id": "CLT-T1"}) == {
        "required_courses": ["CRS-T1"]
    }


def test_degreed_enroll_and_errors(env: Environment) -> None:
    _degreed_rows(env)
    enroll = {"action": "enroll_employee", "email": "n@msg.com", "course_id": "CRS-T1"}
    assert call(env, "degreed_api", enroll) == {"success": True}
    row = record(env, ENROLLMENTS, "ENR-2-000000")
    assert (row["employee_email"], row["course_id"], row["completion_date"]) == ("n@msg.com", "CRS-T1", None)
    assert call(env, "degreed_api", {"action": "check_enrollment", "course_id": "CRS-T1"}) == {
        "available_seats": 1
    }
    count = env.table(ENROLLMENTS).count()
    assert (
        error_of(env, "degreed_api", {**enroll, "course_id": "NOPE"})
        == "Tool execution failed: Course not found: NOPE"
    )
    assert env.table(ENROLLMENTS).count() == count
    assert error_of(env, "degreed_api", {"action": "check_certification_status", "email": "t@msg.com"}) == (
        "Tool execution failed: Missing required parameter: certification_name"
    )
    assert error_of(env, "degreed_api", {"action": "get_required_trainings", "client_id": "NOPE"}) == (
        "Tool execution failed: Client not found: NOPE"
    )
    assert error_of(env, "degreed_api", {"action": "search_courses", "keyword": "x", "extra": 1}) == (
        "Tool execution failed: Input validation failed: extra: Extra inputs are not permitted"
    )
