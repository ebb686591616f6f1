"""Neobank hardware asset, procurement and licence tools on a real Environment (SQLite in memory).

The domain defaults are the fixture: marcus.thompson holds VDB-HW-29417 (laptop, since 2023-01-15) and
VDB-HW-68149 (monitor); VDB-HW-57382 is an unassigned new laptop; VDB-HW-14725 is retired; thomas.white
only has a returned assignment. Tableau is a 25-seat pool with 2 active seats, Salesforce is unlimited.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.envs.neobank import assets
from tests.support.envs import call, failed, failure_text, stored

DOMAIN = "sandbox_neobank_support_v1"


def test_read_only_lists_exactly_the_tools_that_never_write(domain: Domain) -> None:
    for name in assets.TOOLS:
        assert domain.tools[name].writes == (name not in assets.READ_ONLY)
    assert len(assets.READ_ONLY) == 5


# -- assign_device ---------------------------------------------------------------------------------


def test_assign_device_creates_an_assignment_and_flags_the_asset(env: Environment) -> None:
    before = env.table(assets.ASSIGNMENTS).count()
    text = env.call_tool(
        "asset_management_api_assign_device", {"asset_id": "VDB-HW-57382", "email": "lisa.chen@vdb.com"}
    )
    new_id = f"ASN-{before + 1:08d}"
    assert text == f'{{"assignment_id": "{new_id}", "asset_id": "VDB-HW-57382", "employee_id": "WD-294817"}}'
    assert stored(env, assets.ASSIGNMENTS, new_id) == {
        "id": new_id,
        "asset_id": "VDB-HW-57382",
        "employee_id": "WD-294817",
        "assigned_at": None,
        "assigned_by": "system",
        "is_active": True,
        "returned_at": None,
    }
    assert stored(env, assets.ASSETS, "VDB-HW-57382")["is_assigned"] is True
    details = call(env, "asset_management_api_get_device_details", {"asset_id": "VDB-HW-57382"})
    assert details["assigned_to"] == "WD-294817"


def test_listing_devices_after_an_assignment_fails_on_the_missing_timestamp(env: Environment) -> None:
    call(
        env, "asset_management_api_assign_device", {"asset_id": "VDB-HW-57382", "email": "lisa.chen@vdb.com"}
    )
    result = call(env, "asset_management_api_get_employee_devices", {"email": "lisa.chen@vdb.com"})
    assert result["error"].startswith(
        "Tool execution failed: 1 validation error for DeviceInfo\n"
        "assigned_at\n  Input should be a valid string"
    )


@pytest.mark.parametrize(
    ("asset_id", "email", "message"),
    [
        ("VDB-HW-57382", "nobody@vdb.com", "Employee not found: nobody@vdb.com"),
        ("VDB-HW-00000", "lisa.chen@vdb.com", "Asset not found: VDB-HW-00000"),
        ("VDB-HW-29417", "lisa.chen@vdb.com", "Asset VDB-HW-29417 is already assigned"),
        ("VDB-HW-14725", "lisa.chen@vdb.com", "Cannot assign retired asset: VDB-HW-14725"),
    ],
)
def test_assign_device_refusals_leave_state_alone(
    env: Environment, asset_id: str, email: str, message: str
) -> None:
    before = env.state_hash()
    assert (
        failed(env, "asset_management_api_assign_device", {"asset_id": asset_id, "email": email}) == message
    )
    assert env.state_hash() == before


def test_assign_device_employee_is_checked_before_the_asset(env: Environment) -> None:
    assert (
        failed(env, "asset_management_api_assign_device", {"asset_id": "nope", "email": "nobody@vdb.com"})
        == "Employee not found: nobody@vdb.com"
    )


# -- check_inventory -------------------------------------------------------------------------------


def test_check_inventory_counts_non_retired_and_lists_unassigned_new_or_good(env: Environment) -> None:
    text = env.call_tool(
        "asset_management_api_check_inventory", {"device_type": "monitor", "warehouse_location": "sf"}
    )
    assert text == (
        '{"device_type": "monitor", "warehouse_location": "sf", "available_count": 1, "total_count": 2, '
        '"asset_ids": [{"device_model": "LG UltraWide 34WN80C", "asset_id": "VDB-HW-31854"}]}'
    )
    nyc = call(
        env,
        "asset_management_api_check_inventory",
        {"device_type": "laptop_standard", "warehouse_location": "nyc"},
    )
    assert (nyc["available_count"], nyc["total_count"], nyc["asset_ids"]) == (0, 2, [])
    premium = call(
        env,
        "asset_management_api_check_inventory",
        {"device_type": "laptop_premium", "warehouse_location": "sf"},
    )
    assert premium["total_count"] == 2


@pytest.mark.parametrize(
    ("device_type", "location", "message"),
    [
        ("tablet", "sf-X", "Invalid device type: tablet"),
        ("monitor", "sf-X", "Invalid warehouse location: sf-X"),
    ],
)
def test_check_inventory_rejects_unknown_types_then_locations(
    env: Environment, device_type: str, location: str, message: str
) -> None:
    assert (
        failed(
            env,
            "asset_management_api_check_inventory",
            {"device_type": device_type, "warehouse_location": location},
        )
        == message
    )


# -- get_device_details ----------------------------------------------------------------------------


def test_get_device_details_reports_age_and_the_active_assignee(env: Environment) -> None:
    text = env.call_tool("asset_management_api_get_device_details", {"asset_id": "VDB-HW-29417"})
    assert text == (
        '{"asset_id": "VDB-HW-29417", "device_type": "laptop_premium", '
        '"device_model": "MacBook Pro 16-inch M2", "purchase_date": "2023-01-15T00:00:00Z", '
        '"age_months": 35, "condition": "good", '
        '"warehouse_location": "sf", "is_assigned": true, "assigned_to": "WD-847291"}'
    )
    unassigned = call(env, "asset_management_api_get_device_details", {"asset_id": "VDB-HW-57382"})
    assert unassigned["is_assigned"] is False
    assert "assigned_to" not in unassigned


def test_get_device_details_errors(env: Environment) -> None:
    text = env.call_tool("asset_management_api_get_device_details", {"asset_id": "VDB-HW-0"})
    assert text == failure_text("asset_management_api_get_device_details", "Asset not found: VDB-HW-0")
    patched = {**stored(env, assets.ASSETS, "VDB-HW-57382"), "purchase_date": "last spring"}
    env.apply_patch({assets.ASSETS: [patched]})
    assert (
        failed(env, "asset_management_api_get_device_details", {"asset_id": "VDB-HW-57382"})
        == "Invalid purchase_date for asset VDB-HW-57382: 'last spring'"
    )


def test_age_counts_whole_thirty_day_periods_and_takes_naive_dates_as_utc(env: Environment) -> None:
    patched = {**stored(env, assets.ASSETS, "VDB-HW-57382"), "purchase_date": "2025-11-17T10:00:01"}
    env.apply_patch({assets.ASSETS: [patched]})
    result = call(env, "asset_management_api_get_device_details", {"asset_id": "VDB-HW-57382"})
    assert result["age_months"] == 0
    patched["purchase_date"] = "2025-11-17T10:00:00+00:00"
    env.apply_patch({assets.ASSETS: [patched]})
    assert (
        call(env, "asset_management_api_get_device_details", {"asset_id": "VDB-HW-57382"})["age_months"] == 1
    )


# -- get_employee_devices --------------------------------------------------------------------------


def test_get_employee_devices_lists_active_assignments_in_order(env: Environment) -> None:
    text = env.call_tool("asset_management_api_get_employee_devices", {"email": "marcus.thompson@vdb.com"})
    assert text == (
        '{"employee_id": "WD-847291", "devices": ['
        '{"asset_id": "VDB-HW-29417", "device_type": "laptop_premium", '
        '"device_model": "MacBook Pro 16-inch M2", "assigned_at": "2023-01-20T10:00:00Z", '
        '"condition": "good", "age_months": 35}, '
        '{"asset_id": "VDB-HW-68149", "device_type": "monitor", '
        '"device_model": "Dell UltraSharp 27 U2723DE", "assigned_at": "2023-06-15T10:00:00Z", '
        '"condition": "good", "age_months": 30}]}'
    )
    assert call(env, "asset_management_api_get_employee_devices", {"email": "thomas.white@vdb.com"}) == {
        "employee_id": "WD-218647",
        "devices": [],
    }


def test_get_employee_devices_unknown_employee(env: Environment) -> None:
    assert (
        failed(env, "asset_management_api_get_employee_devices", {"email": "ghost@vdb.com"})
        == "Employee not found: ghost@vdb.com"
    )


# -- retire_device ---------------------------------------------------------------------------------


def test_retire_device_closes_the_active_assignment(env: Environment) -> None:
    text = env.call_tool("asset_management_api_retire_device", {"asset_id": "VDB-HW-29417"})
    assert text == (
        '{"asset_id": "VDB-HW-29417", "previous_condition": "good", '
        '"retired_at": "2025-12-17T10:00:00Z", "was_assigned": true}'
    )
    asset = stored(env, assets.ASSETS, "VDB-HW-29417")
    assert (asset["condition"], asset["is_assigned"]) == ("retired", False)
    assignment = stored(env, assets.ASSIGNMENTS, "ASN-39471826")
    assert (assignment["is_active"], assignment["returned_at"]) == (False, "2025-12-17T10:00:00Z")
    assert (
        failed(env, "asset_management_api_retire_device", {"asset_id": "VDB-HW-29417"})
        == "Asset VDB-HW-29417 is already retired"
    )


def test_retire_unassigned_device_touches_no_assignment(env: Environment) -> None:
    before = [r.model_dump(mode="json") for r in env.table(assets.ASSIGNMENTS).all()]
    result = call(env, "asset_management_api_retire_device", {"asset_id": "VDB-HW-57382"})
    assert result == {
        "asset_id": "VDB-HW-57382",
        "previous_condition": "new",
        "retired_at": "2025-12-17T10:00:00Z",
        "was_assigned": False,
    }
    assert [r.model_dump(mode="json") for r in env.table(assets.ASSIGNMENTS).all()] == before


def test_retire_unknown_device(env: Environment) -> None:
    assert (
        failed(env, "asset_management_api_retire_device", {"asset_id": "VDB-HW-0"})
        == "Asset not found: VDB-HW-0"
    )


# -- create_order ----------------------------------------------------------------------------------

ORDER = {
    "device_type": "monitor",
    "device_model": "Dell P2425H",
    "quantity": 2,
    "expected_delivery_date": "2025-10-15T09:00:00Z",
    "ship_to_location": "1 Main St",
    "requester_email": "lisa.chen@vdb.com",
}


def test_create_order_stores_a_pending_order_with_a_date_only_delivery(env: Environment) -> None:
    new_id = f"HW-ORDER-{env.table(assets.ORDERS).count() + 1:07d}"
    text = env.call_tool("hardware_procurement_api_create_order", ORDER)
    assert text == f'{{"order_id": "{new_id}", "status": "pending"}}'
    assert stored(env, assets.ORDERS, new_id) == {
        "id": new_id,
        "device_type": "monitor",
        "device_model": "Dell P2425H",
        "quantity": 2,
        "ship_to_location": "1 Main St",
        "requester_id": "WD-294817",
        "ticket_id": None,
        "status": "pending",
        "created_at": None,
        "expected_delivery_date": "2025-10-15",
        "delivered_at": None,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"requester_email": "ghost@vdb.com"}, "Requester not found: ghost@vdb.com"),
        (
            {"expected_delivery_date": "next week"},
            "Invalid expected_delivery_date format: next week. Expected YYYY-MM-DD format.",
        ),
    ],
)
def test_create_order_refusals(env: Environment, change: dict[str, Any], message: str) -> None:
    before = env.state_hash()
    assert failed(env, "hardware_procurement_api_create_order", {**ORDER, **change}) == message
    assert env.state_hash() == before


# -- licences --------------------------------------------------------------------------------------


def test_allocate_license_appends_an_allocation(env: Environment) -> None:
    new_id = f"LAL-{env.table(assets.ALLOCATIONS).count() + 1:08d}"
    assert call(
        env,
        "license_management_api_allocate_license",
        {"software_name": "tableau", "email": "david.kim@vdb.com"},
    ) == {"allocation_id": new_id}
    assert stored(env, assets.ALLOCATIONS, new_id) == {
        "id": new_id,
        "license_id": "LIC-29471863",
        "employee_id": "WD-465782",
        "allocated_at": None,
        "allocated_by": "system",
        "is_active": True,
        "deallocated_at": None,
    }
    availability = call(env, "license_management_api_check_availability", {"software_name": "Tableau"})
    assert availability == {"available_licenses": 22, "total_licenses": 25, "license_type": "standard"}


@pytest.mark.parametrize(
    ("software", "email", "message"),
    [
        ("Tableau", "ghost@vdb.com", "Employee not found: ghost@vdb.com"),
        ("Notepad", "lisa.chen@vdb.com", "Software not found: Notepad"),
        ("Tableau", "lisa.chen@vdb.com", "Employee already has a license for this software: Tableau"),
    ],
)
def test_allocate_license_refusals(env: Environment, software: str, email: str, message: str) -> None:
    before = env.state_hash()
    assert (
        failed(env, "license_management_api_allocate_license", {"software_name": software, "email": email})
        == message
    )
    assert env.state_hash() == before


def test_allocate_license_exhausted_limited_pool_but_never_unlimited(env: Environment) -> None:
    looker = {**stored(env, assets.LICENSES, "LIC-31854792"), "total_licenses": 1}
    env.apply_patch({assets.LICENSES: [looker]})
    assert (
        failed(
            env,
            "license_management_api_allocate_license",
            {"software_name": "Looker", "email": "lisa.chen@vdb.com"},
        )
        == "No licenses available in pool"
    )
    assert (
        call(env, "license_management_api_check_availability", {"software_name": "Looker"})[
            "available_licenses"
        ]
        == 0
    )
    slack = call(
        env,
        "license_management_api_allocate_license",
        {"software_name": "Slack", "email": "lisa.chen@vdb.com"},
    )
    assert "allocation_id" in slack


def test_check_availability_unlimited_pool_omits_counts(env: Environment) -> None:
    assert env.call_tool("license_management_api_check_availability", {"software_name": "Salesforce"}) == (
        '{"license_type": "unlimited"}'
    )
    assert (
        failed(env, "license_management_api_check_availability", {"software_name": "Visio"})
        == "Software not found in license inventory: Visio"
    )


def test_check_license_type(env: Environment) -> None:
    assert env.call_tool("license_management_api_check_license_type", {"software_name": "TABLEAU"}) == (
        '{"license_type": "standard", "license_id": "LIC-29471863", "annual_cost_per_license": 840}'
    )
    assert call(env, "license_management_api_check_license_type", {"software_name": "Slack"}) == {
        "license_type": "unlimited",
        "license_id": "LIC-84726391",
    }
    assert (
        failed(env, "license_management_api_check_license_type", {"software_name": "Visio"})
        == "Software not found in license inventory: Visio"
    )
