"""Consulting catalogue, CRM, directory, access, approval and procurement tools on a real Environment.

Runs over the domain defaults (SQLite in memory), with small patches where a case needs other rows.
Default facts used: Michael Chen is on leave with backup Sarah Johnson; Richard Williams has no backup;
Jennifer Patel holds the default ASN-0023456 assignment to ENG-0012345 (store timestamps end in ``Z``).
"""

from __future__ import annotations

from benchmark.envs import Domain, Environment
from benchmark.envs.consulting import directory
from tests.support.envs import call, failed, stored


def test_only_access_and_approval_creation_write(domain: Domain) -> None:
    writers = {name for name in directory.TOOLS if domain.tools[name].writes}
    assert writers == {"okta_provision_access", "approval_create_request"}


def test_catalog_get_details(env: Environment) -> None:
    text = env.call_tool("software_catalog_get_details", {"catalog_id": "CAT-0078901"})
    assert (
        text
        == '{"id": "CAT-0078901", "name": "Notion Enterprise", "annual_cost": 600, "pool_type": "enterprise"}'
    )
    assert (
        failed(env, "software_catalog_get_details", {"catalog_id": "CAT-NOPE"})
        == "Software not found in catalog: CAT-NOPE"
    )


def test_catalog_search_is_case_insensitive_substring_in_store_order(env: Environment) -> None:
    env.apply_patch(
        {
            directory.CATALOG: [
                {"id": "CAT-0000001", "name": "Notion", "annual_cost": 96, "pool_type": "standard"}
            ]
        }
    )
    result = call(env, "software_catalog_search", {"software_name": "NOTION"})
    assert [r["id"] for r in result["results"]] == ["CAT-0078901", "CAT-0000001"]
    assert result["results"][1] == {
        "id": "CAT-0000001",
        "name": "Notion",
        "annual_cost": 96,
        "pool_type": "standard",
    }
    assert (
        failed(env, "software_catalog_search", {"software_name": "Nope"})
        == "No matching software found in catalog for: Nope"
    )


def test_check_employee_assignment(env: Environment) -> None:
    args = {"email": "jennifer.patel@msg.com", "engagement_code": "ENG-0012345"}
    text = env.call_tool("salesforce_crm_check_employee_assignment", args)
    assert text == (
        '{"assigned": true, "assignment_status": "active", '
        '"start_date": "2024-02-01T00:00:00+00:00", "end_date": "2024-12-31T00:00:00+00:00"}'
    )
    booked = call(
        env,
        "salesforce_crm_check_employee_assignment",
        {"email": "bob.taylor@msg.com", "engagement_code": "ENG-0034567"},
    )
    assert booked == {
        "assigned": True,
        "assignment_status": "booked",
        "start_date": "2025-01-01T00:00:00+00:00",
    }
    other = {"email": "jennifer.patel@msg.com", "engagement_code": "ENG-0023456"}
    assert env.call_tool("salesforce_crm_check_employee_assignment", other) == '{"assigned": false}'


def test_check_employee_assignment_requires_both_fields(env: Environment) -> None:
    assert (
        failed(env, "salesforce_crm_check_employee_assignment", {"email": "a@msg.com"})
        == "Input validation failed: engagement_code: Field required"
    )


def test_get_engagement_drops_missing_end_date(env: Environment) -> None:
    result = call(env, "salesforce_crm_get_engagement", {"engagement_code": "ENG-0034567"})
    assert result == {
        "engagement_code": "ENG-0034567",
        "client_id": "CLT-0012345",
        "engagement_manager_email": "emily.rodriguez@msg.com",
        "status": "pipeline",
        "start_date": "2025-01-01T00:00:00+00:00",
    }
    assert (
        failed(env, "salesforce_crm_get_engagement", {"engagement_code": "ENG-X"})
        == "Engagement not found: ENG-X"
    )


def test_workday_get_employee(env: Environment) -> None:
    env.apply_patch(
        {
            directory.EMPLOYEES: [
                {
                    "email": "new.hire@msg.com",
                    "name": "New Hire",
                    "level": "Analyst",
                    "office_location": "Austin",
                    "start_date": "2025-09-25T00:00:00",
                }
            ]
        }
    )
    text = env.call_tool("workday_api", {"action": "get_employee", "email": "new.hire@msg.com"})
    assert text == (
        '{"employee_data": {"email": "new.hire@msg.com", "name": "New Hire", "level": "Analyst", '
        '"office_location": "Austin", "start_date": "2025-09-25T00:00:00", '
        '"availability_status": "available"}}'
    )
    full = call(env, "workday_api", {"action": "get_employee", "email": "michael.chen@msg.com"})
    assert full["employee_data"]["backup_approver_email"] == "sarah.johnson@msg.com"
    assert full["employee_data"]["onboarding_phase"] == "completed"


def test_workday_errors(env: Environment) -> None:
    assert failed(env, "workday_api", {"action": "get_employee"}) == "Missing required parameter: email"
    assert (
        failed(env, "workday_api", {"action": "get_employee", "email": "nobody@msg.com"})
        == "Employee not found: nobody@msg.com"
    )
    assert (
        failed(env, "workday_api", {"action": "fire_employee", "email": "nobody@msg.com"})
        == "Input validation failed: action: Input should be 'get_employee'"
    )


def test_okta_provision_access_appends_first_free_ids(env: Environment) -> None:
    logs = env.table(directory.ACCESS_LOGS)
    before = logs.count()
    env.apply_patch(
        {directory.ACCESS_LOGS: [{"id": "AAL-2-000000", "employee_email": "x@msg.com", "app_name": "Box"}]}
    )
    first = env.call_tool("okta_provision_access", {"email": "a@msg.com", "app_name": "Slack"})
    second = env.call_tool(
        "okta_provision_access",
        {"email": "nobody@elsewhere.com", "app_name": "Zoom", "access_type": "read_only"},
    )
    assert first == second == '{"success": true}'
    assert logs.count() == before + 3
    created = stored(env, directory.ACCESS_LOGS, "AAL-2-000001")
    assert created == {
        "id": "AAL-2-000001",
        "employee_email": "a@msg.com",
        "app_name": "Slack",
        "access_type": "full_access",
    }
    assert stored(env, directory.ACCESS_LOGS, "AAL-2-000002")["access_type"] == "read_only"


def test_okta_provision_access_rejects_unknown_access_type(env: Environment) -> None:
    before = env.table(directory.ACCESS_LOGS).count()
    assert failed(
        env, "okta_provision_access", {"email": "a@msg.com", "app_name": "Slack", "access_type": "owner"}
    ) == (
        "Input validation failed: access_type: "
        "Input should be 'full_access', 'read_only', 'contributor' or 'admin'"
    )
    assert env.table(directory.ACCESS_LOGS).count() == before


def test_mavenlink_get_engagement(env: Environment) -> None:
    result = call(env, "mavenlink_api", {"action": "get_engagement", "engagement_code": "ENG-0089012"})
    assert result == {
        "engagement_data": {
            "engagement_code": "ENG-0089012",
            "status": "pipeline",
            "start_date": "2025-02-01T00:00:00+00:00",
            "senior_manager_email": "james.anderson@msg.com",
        }
    }
    assert (
        failed(env, "mavenlink_api", {"action": "get_engagement", "engagement_code": "ENG-X"})
        == "Engagement not found: ENG-X"
    )
    assert (
        failed(env, "mavenlink_api", {"action": "get_engagement", "email": "a@msg.com"})
        == "Missing required parameter: engagement_code"
    )


def test_mavenlink_assignments_and_validation(env: Environment) -> None:
    result = call(
        env, "mavenlink_api", {"action": "get_employee_assignments", "email": "frank.martinez@msg.com"}
    )
    assert result == {
        "assignments": [
            {
                "engagement_code": "ENG-0089012",
                "assignment_status": "booked",
                "start_date": "2025-02-01T00:00:00+00:00",
                "senior_manager_email": "james.anderson@msg.com",
            }
        ]
    }
    none = env.call_tool("mavenlink_api", {"action": "get_employee_assignments", "email": "nobody@msg.com"})
    assert none == '{"assignments": []}'
    assert (
        failed(env, "mavenlink_api", {"action": "get_employee_assignments"})
        == "Missing required parameter: email"
    )
    valid = {"action": "validate_engagement_code", "engagement_code": "ENG-0101234"}
    assert env.call_tool("mavenlink_api", valid) == '{"valid": true}'
    invalid = {"action": "validate_engagement_code", "engagement_code": "ENG-9999999"}
    assert env.call_tool("mavenlink_api", invalid) == '{"valid": false}'


def test_approval_create_then_get_status(env: Environment) -> None:
    args = {
        "request_type": "software_access",
        "requester_email": "jennifer.patel@msg.com",
        "approver_email": "carol.davis@msg.com",
        "amount": "420",
    }
    assert env.call_tool("approval_create_request", args) == '{"approval_id": "APR-2-000000"}'
    approval = stored(env, directory.APPROVALS, "APR-2-000000")
    assert approval == {
        "id": "APR-2-000000",
        "request_type": "software_access",
        "requester_email": "jennifer.patel@msg.com",
        "approver_email": "carol.davis@msg.com",
        "amount": 420,
        "engagement_code": None,
        "status": "pending",
    }
    status = call(
        env,
        "approval_get_status",
        {"request_type": "software_access", "requester_email": "jennifer.patel@msg.com"},
    )
    assert status == {
        "results": [
            {
                "approval_id": "APR-1000001",
                "status": "approved",
                "request_type": "software_access",
                "approver_email": "sarah.johnson@msg.com",
                "engagement_code": "ENG-0012345",
            },
            {
                "approval_id": "APR-2-000000",
                "status": "pending",
                "request_type": "software_access",
                "approver_email": "carol.davis@msg.com",
            },
        ]
    }
    filtered = call(
        env,
        "approval_get_status",
        {
            "request_type": "software_access",
            "requester_email": "jennifer.patel@msg.com",
            "engagement_code": "ENG-0012345",
        },
    )
    assert [r["approval_id"] for r in filtered["results"]] == ["APR-1000001"]


def test_approval_create_rejects_bad_amount(env: Environment) -> None:
    before = env.table(directory.APPROVALS).count()
    args = {
        "request_type": "travel",
        "requester_email": "a@msg.com",
        "approver_email": "b@msg.com",
        "amount": "x",
    }
    assert failed(env, "approval_create_request", args) == (
        "Input validation failed: amount: "
        "Input should be a valid integer, unable to parse string as an integer"
    )
    assert env.table(directory.APPROVALS).count() == before


def test_approval_get_status_not_found_placeholder(env: Environment) -> None:
    args = {
        "request_type": "travel",
        "requester_email": "nobody@msg.com",
        "engagement_code": "ENG-0012345",
    }
    text = env.call_tool("approval_get_status", args)
    assert text == (
        '{"results": [{"approval_id": "NOT_FOUND", "status": "not_found", "request_type": "travel", '
        '"approver_email": "", "engagement_code": "ENG-0012345"}]}'
    )
    other = call(
        env,
        "approval_get_status",
        {
            "request_type": "travel",
            "requester_email": "michael.harrison@msg.com",
            "approver_email": "x@msg.com",
        },
    )
    assert other == {
        "results": [
            {
                "approval_id": "NOT_FOUND",
                "status": "not_found",
                "request_type": "travel",
                "approver_email": "x@msg.com",
            }
        ]
    }


def test_approver_lookup(env: Environment) -> None:
    text = env.call_tool("approver_lookup_get_contact", {"email": "michael.chen@msg.com"})
    assert text == (
        '{"email": "michael.chen@msg.com", "name": "Michael Chen", "availability_status": "on_leave", '
        '"backup_approver_email": "sarah.johnson@msg.com"}'
    )
    no_backup = call(env, "approver_lookup_get_contact", {"email": "richard.williams@msg.com"})
    assert no_backup == {
        "email": "richard.williams@msg.com",
        "name": "Richard Williams",
        "availability_status": "available",
    }
    assert (
        failed(env, "approver_lookup_get_contact", {"email": "nobody@msg.com"})
        == "Approver not found: nobody@msg.com"
    )


def test_hardware_order_is_constant_and_writes_nothing(env: Environment) -> None:
    before = env.state_hash()
    args = {"device_model": "iPhone 13", "quantity": "1", "deliver_to": "Chicago"}
    assert env.call_tool("hardware_procurement_create_order", args) == '{"order_id": "HWO-0056435"}'
    assert env.state_hash() == before
    assert failed(env, "hardware_procurement_create_order", {**args, "deliver_to": "Boston"}) == (
        "Input validation failed: deliver_to: "
        "Input should be 'New York', 'San Francisco', 'Chicago' or 'Austin'"
    )
