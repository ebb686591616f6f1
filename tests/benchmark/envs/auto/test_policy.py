"""Auto-insurance policy tools and VIN lookup on a real Environment (SQLite in memory).

Most cases run on the domain defaults (5 policies, 5 drivers, 5 vehicles, 5 documents); one runs on a
task whose patch holds a policy cancelled for non-payment.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.envs.auto import policy
from benchmark.tasks import BenchData
from tests.support.envs import call, failure, stored

DOMAIN = "sandbox_auto_insurance"


def sha_id(prefix: str, seed: str) -> str:
    return prefix + hashlib.sha256(seed.encode()).hexdigest()[:8].upper()


def test_read_only_lists_exactly_the_tools_that_never_write(domain: Domain) -> None:
    assert {
        "policy_get_policy_details",
        "policy_get_policy_drivers",
        "policy_get_policy_vehicles",
        "policy_get_vehicle_details",
        "lookup_validate_vin",
    } == policy.READ_ONLY
    for name in policy.TOOLS:
        assert domain.tools[name].writes == (name not in policy.READ_ONLY)


def test_get_policy_details_renames_id_and_omits_nulls(env: Environment) -> None:
    text = env.call_tool("policy_get_policy_details", {"policy_id": "POL-0022222222"})
    assert list(json.loads(text)) == [
        "policy_id",
        "customer_id",
        "status",
        "state",
        "effective_date",
        "expiration_date",
        "renewal_date",
        "cancellation_date",
        "cancellation_reason",
        "named_insured_id",
        "automatic_extension_days",
        "at_fault_claims_3_years",
        "lapse_flag",
    ]
    out = json.loads(text)
    assert out["status"] == "Pending Cancellation"
    assert out["cancellation_reason"] == "User Requested"
    assert out["at_fault_claims_3_years"] == 2


def test_get_policy_details_hides_lapse_dates(env: Environment) -> None:
    out = call(env, "policy_get_policy_details", {"policy_id": "POL-0033333333"})
    assert out["lapse_flag"] is True
    assert out["co_insured_id"] == "CUS-00033334"
    assert "lapse_start" not in out and "lapse_end" not in out


def test_get_policy_details_unknown_policy(env: Environment) -> None:
    out = call(env, "policy_get_policy_details", {"policy_id": "POL-X"})
    assert out == failure("policy_get_policy_details", "Policy with ID 'POL-X' not found")


def test_get_policy_drivers_all_and_active_only(env: Environment) -> None:
    call(
        env,
        "policy_update_driver_status",
        {"driver_id": "DRV-00012346", "new_status": "Removed", "effective_date": "2025-10-01"},
    )
    everyone = call(env, "policy_get_policy_drivers", {"policy_id": "POL-0012345678"})
    assert everyone["driver_count"] == 2
    assert everyone["drivers"][0] == {
        "id": "DRV-00012345",
        "name": "John Smith",
        "date_of_birth": "1985-03-15",
        "status": "Rated",
        "effective_date": "2024-01-01",
        "is_named_insured": True,
        "is_co_insured": False,
    }
    active = call(env, "policy_get_policy_drivers", {"policy_id": "POL-0012345678", "active_only": True})
    assert [d["id"] for d in active["drivers"]] == ["DRV-00012345"]
    assert active["driver_count"] == 1


def test_get_policy_drivers_unknown_policy(env: Environment) -> None:
    out = call(env, "policy_get_policy_drivers", {"policy_id": "POL-X"})
    assert out == failure("policy_get_policy_drivers", "Policy with ID 'POL-X' not found")


def test_get_policy_vehicles_all_and_active_only(env: Environment) -> None:
    call(
        env,
        "policy_update_vehicle_status",
        {"vehicle_id": "VEH-00012345", "new_status": "Removed", "effective_date": "2025-10-01"},
    )
    everyone = call(env, "policy_get_policy_vehicles", {"policy_id": "POL-0012345678"})
    assert [(v["id"], v["status"]) for v in everyone["vehicles"]] == [
        ("VEH-00012345", "Removed"),
        ("VEH-00012346", "Active"),
    ]
    assert everyone["vehicles"][1] == {
        "id": "VEH-00012346",
        "vin": "2T1BURHE1HC123789",
        "year": 2020,
        "make": "Toyota",
        "model": "Camry",
        "status": "Active",
        "effective_date": "2024-03-15",
    }
    active = call(env, "policy_get_policy_vehicles", {"policy_id": "POL-0012345678", "active_only": "true"})
    assert [v["id"] for v in active["vehicles"]] == ["VEH-00012346"]
    assert active["vehicle_count"] == 1


def test_get_policy_vehicles_unknown_policy(env: Environment) -> None:
    out = call(env, "policy_get_policy_vehicles", {"policy_id": "POL-X"})
    assert out == failure("policy_get_policy_vehicles", "Policy with ID 'POL-X' not found")


def test_get_vehicle_details(env: Environment) -> None:
    out = call(env, "policy_get_vehicle_details", {"vehicle_id": "VEH-00033333"})
    assert out == {
        "vehicle_id": "VEH-00033333",
        "policy_id": "POL-0033333333",
        "vin": "3VWCX7AJ9FM654789",
        "year": 2019,
        "make": "Volkswagen",
        "model": "Jetta",
        "status": "Active",
        "effective_date": "2024-06-01",
        "date_added_to_policy": "2024-06-01",
        "collision_coverage": True,
        "comprehensive_coverage": False,
        "rental_coverage": False,
        "uw_pending": False,
    }


def test_get_vehicle_details_unknown_vehicle(env: Environment) -> None:
    out = call(env, "policy_get_vehicle_details", {"vehicle_id": "VEH-X"})
    assert out == failure("policy_get_vehicle_details", "Vehicle with ID 'VEH-X' not found")


def test_add_driver_creates_hashed_row(env: Environment) -> None:
    args = {
        "policy_id": "POL-0012345678",
        "name": "Timmy Smith",
        "date_of_birth": "2008-02-29",
        "relationship": "Son",
        "status": "Excluded",
        "effective_date": "2025-10-01",
        "exclusion_form_required": True,
        "uw_pending": None,
    }
    driver_id = sha_id("DRV-2-", "POL-0012345678_Timmy Smith_2008-02-29")
    assert call(env, "policy_add_driver", args) == {"driver_id": driver_id, "status": "Excluded"}
    assert stored(env, policy.DRIVERS, driver_id) == {
        "id": driver_id,
        "policy_id": "POL-0012345678",
        "customer_id": None,
        "name": "Timmy Smith",
        "date_of_birth": "2008-02-29",
        "license_number": None,
        "license_state": None,
        "relationship": "Son",
        "status": "Excluded",
        "effective_date": "2025-10-01",
        "removal_date": None,
        "is_named_insured": False,
        "is_co_insured": False,
        "uw_pending": False,
        "exclusion_form_required": True,
    }


def test_add_driver_rejects_same_name_and_dob_on_policy(env: Environment) -> None:
    args = {
        "policy_id": "POL-0012345678",
        "name": "Sarah Smith",
        "date_of_birth": "1987-07-22",
        "relationship": "Spouse",
        "status": "Rated",
        "effective_date": "2025-10-01",
    }
    before = env.table(policy.DRIVERS).count()
    assert call(env, "policy_add_driver", args) == failure(
        "policy_add_driver",
        "Driver with name 'Sarah Smith' and DOB '1987-07-22' already exists on this policy",
    )
    assert env.table(policy.DRIVERS).count() == before
    elsewhere = call(env, "policy_add_driver", {**args, "policy_id": "POL-0087654321"})
    assert elsewhere["driver_id"] == sha_id("DRV-2-", "POL-0087654321_Sarah Smith_1987-07-22")


def test_add_driver_unknown_policy(env: Environment) -> None:
    args = {
        "policy_id": "POL-X",
        "name": "A",
        "date_of_birth": "2000-01-01",
        "relationship": "Self",
        "status": "Rated",
        "effective_date": "2025-10-01",
    }
    assert call(env, "policy_add_driver", args) == failure(
        "policy_add_driver", "Policy with ID 'POL-X' not found"
    )


def test_add_vehicle_creates_active_row_with_default_coverage(env: Environment) -> None:
    args = {
        "policy_id": "POL-0011111111",
        "vin": "5YJSA1E58RF839214",
        "year": "2024",
        "make": "Tesla",
        "model": "Model S",
        "effective_date": "2025-09-30",
        "uw_pending": True,
    }
    vehicle_id = sha_id("VEH-2-", "POL-0011111111_5YJSA1E58RF839214")
    assert call(env, "policy_add_vehicle", args) == {"vehicle_id": vehicle_id}
    row = stored(env, policy.VEHICLES, vehicle_id)
    assert row["year"] == 2024
    assert row["status"] == "Active"
    assert row["date_added_to_policy"] == row["effective_date"] == "2025-09-30"
    assert (row["collision_coverage"], row["comprehensive_coverage"], row["rental_coverage"]) == (
        True,
        True,
        False,
    )
    assert row["uw_pending"] is True and row["removal_date"] is None


def test_add_vehicle_rejects_vin_already_on_policy(env: Environment) -> None:
    args = {
        "policy_id": "POL-0012345678",
        "vin": "1HGCM82633A123456",
        "year": 2022,
        "make": "Honda",
        "model": "Accord",
        "effective_date": "2025-10-01",
    }
    assert call(env, "policy_add_vehicle", args) == failure(
        "policy_add_vehicle", "VIN '1HGCM82633A123456' already exists on this policy"
    )
    assert call(env, "policy_add_vehicle", {**args, "policy_id": "POL-X"}) == failure(
        "policy_add_vehicle", "Policy with ID 'POL-X' not found"
    )


def test_generate_document_link_is_idempotent(env: Environment) -> None:
    args = {
        "policy_id": "POL-0087654321",
        "document_type": "id_card",
        "ticket_id": "9",
        "expiration_date": "2025-10-02T13:00:05Z",
    }
    document_id = sha_id("DOC-2-", "POL-0087654321_DocumentType.ID_CARD_9")
    url = "https://portal.horizonshield.com/docs/secure/POL-0087654321_id_card_9"
    expected = {"document_id": document_id, "url": url, "expires_at": "2025-10-02T13:00:05Z"}
    assert call(env, "policy_generate_document_link", args) == expected
    assert stored(env, policy.DOCUMENTS, document_id) == {
        "id": document_id,
        "policy_id": "POL-0087654321",
        "ticket_id": "9",
        "document_type": "id_card",
        "url": url,
        "created_at": "2025-10-02T13:00:05Z",
        "expires_at": "2025-10-02T13:00:05Z",
    }
    count = env.table(policy.DOCUMENTS).count()
    again = call(env, "policy_generate_document_link", {**args, "expiration_date": "2025-12-31"})
    assert again == expected
    assert env.table(policy.DOCUMENTS).count() == count


def test_generate_document_link_rejects_bad_expiration_and_unknown_policy(env: Environment) -> None:
    args = {
        "policy_id": "POL-0012345678",
        "document_type": "proof_of_insurance",
        "ticket_id": "1",
        "expiration_date": "tomorrow",
    }
    count = env.table(policy.DOCUMENTS).count()
    assert call(env, "policy_generate_document_link", args) == failure(
        "policy_generate_document_link",
        "Invalid expiration_date format: 'tomorrow'. Expected ISO 8601 format (e.g., '2024-01-16T10:05:00Z')",
    )
    assert call(env, "policy_generate_document_link", {**args, "policy_id": "POL-X"}) == failure(
        "policy_generate_document_link", "Policy with ID 'POL-X' not found"
    )
    assert env.table(policy.DOCUMENTS).count() == count


def test_schedule_cancellation_sets_pending(env: Environment) -> None:
    args = {
        "policy_id": "POL-0011111111",
        "cancellation_date": "2025-10-15",
        "cancellation_reason": "Non-Payment",
    }
    assert call(env, "policy_schedule_cancellation", args) == {
        "policy_id": "POL-0011111111",
        "status": "Pending Cancellation",
    }
    row = stored(env, policy.POLICIES, "POL-0011111111")
    assert (row["status"], row["cancellation_date"], row["cancellation_reason"]) == (
        "Pending Cancellation",
        "2025-10-15",
        "Non-Payment",
    )


def test_schedule_cancellation_unknown_policy(env: Environment) -> None:
    args = {"policy_id": "POL-X", "cancellation_date": "2025-10-15", "cancellation_reason": "Fraud"}
    assert call(env, "policy_schedule_cancellation", args) == failure(
        "policy_schedule_cancellation", "Policy with ID 'POL-X' not found"
    )


def test_reinstate_without_lapse_keeps_old_lapse_dates(env: Environment) -> None:
    out = call(
        env,
        "policy_reinstate_policy",
        {"policy_id": "POL-0033333333", "lapse_flag": False, "lapse_start": "2025-01-01"},
    )
    assert out == {"policy_id": "POL-0033333333", "status": "Active", "lapse_flag": False}
    row = stored(env, policy.POLICIES, "POL-0033333333")
    assert (row["lapse_flag"], row["lapse_start"], row["lapse_end"]) == (False, "2024-03-01", "2024-05-15")


def test_reinstate_unknown_policy(env: Environment) -> None:
    assert call(env, "policy_reinstate_policy", {"policy_id": "POL-X", "lapse_flag": True}) == failure(
        "policy_reinstate_policy", "Policy with ID 'POL-X' not found"
    )


def test_reinstate_cancelled_policy_from_a_task(
    domain: Domain, bench: BenchData, sqlite_db: Database
) -> None:
    def cancelled(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if r.get("status") == "Cancelled for Non-Payment"]

    task = next(t for t in bench.tasks([DOMAIN]) if cancelled(t.data_patch.get(policy.POLICIES, [])))
    policy_id = cancelled(task.data_patch[policy.POLICIES])[0]["id"]
    with Environment(domain, sqlite_db) as env:
        env.apply_patch(task.data_patch)
        args = {
            "policy_id": policy_id,
            "lapse_flag": True,
            "lapse_start": "2025-09-20",
            "lapse_end": "2025-10-01",
        }
        assert call(env, "policy_reinstate_policy", args) == {
            "policy_id": policy_id,
            "status": "Active",
            "lapse_flag": True,
        }
        row = stored(env, policy.POLICIES, policy_id)
        assert row["status"] == "Active"
        assert row["cancellation_date"] is None and row["cancellation_reason"] is None
        assert (row["lapse_start"], row["lapse_end"]) == ("2025-09-20", "2025-10-01")


@pytest.mark.parametrize(
    ("driver_id", "status", "day", "removal_date"),
    [
        pytest.param("DRV-00087655", "Removed", "2025-10-03", "2025-10-03", id="removed-sets-removal-date"),
        pytest.param("DRV-00011111", "Excluded", "2025-10-04", None, id="excluded-leaves-removal-date"),
    ],
)
def test_update_driver_status_sets_dates(
    env: Environment, driver_id: str, status: str, day: str, removal_date: str | None
) -> None:
    args = {"driver_id": driver_id, "new_status": status, "effective_date": day}
    assert call(env, "policy_update_driver_status", args) == {"driver_id": driver_id, "status": status}
    row = stored(env, policy.DRIVERS, driver_id)
    assert (row["status"], row["effective_date"], row["removal_date"]) == (status, day, removal_date)
    missing = {**args, "driver_id": "DRV-X"}
    assert call(env, "policy_update_driver_status", missing) == failure(
        "policy_update_driver_status", "Driver with ID 'DRV-X' not found"
    )


def test_update_vehicle_status_keeps_effective_date(env: Environment) -> None:
    args = {"vehicle_id": "VEH-00087654", "new_status": "Removed", "effective_date": "2025-10-05"}
    assert call(env, "policy_update_vehicle_status", args) == {
        "vehicle_id": "VEH-00087654",
        "status": "Removed",
    }
    row = stored(env, policy.VEHICLES, "VEH-00087654")
    assert (row["status"], row["effective_date"], row["removal_date"]) == (
        "Removed",
        "2023-06-15",
        "2025-10-05",
    )
    missing = {**args, "vehicle_id": "VEH-X"}
    assert call(env, "policy_update_vehicle_status", missing) == failure(
        "policy_update_vehicle_status", "Vehicle with ID 'VEH-X' not found"
    )


@pytest.mark.parametrize(
    ("vin", "expected"),
    [
        ("1FTFW1ET5DFC12265", {"valid": True, "year": 2013, "make": "Ford Truck", "model": "F-150"}),
        (" 2hgfe2f53rh126486 ", {"valid": True, "year": 2024, "make": "Honda Canada"}),
        ("1HGCM82633A123456", {"valid": True, "make": "Honda", "model": "Accord"}),
        ("JTMBWRFV2P1835721", {"valid": True, "year": 2023}),
    ],
)
def test_validate_vin_decodes(env: Environment, vin: str, expected: dict[str, Any]) -> None:
    assert call(env, "lookup_validate_vin", {"vin": vin}) == expected


def test_validate_vin_rejects_bad_formats(env: Environment) -> None:
    assert call(env, "lookup_validate_vin", {"vin": "1HGCM82633A12345"}) == failure(
        "lookup_validate_vin", "Invalid VIN format. VIN must be exactly 17 characters."
    )
    assert call(env, "lookup_validate_vin", {"vin": "1HGCM82633A-23456"}) == failure(
        "lookup_validate_vin", "Invalid VIN format. VIN must contain only letters and numbers."
    )
