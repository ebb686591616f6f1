"""Okta, Okta security, Workday and incident tools on a real Environment (SQLite in memory).

The patch adds a recently closed and a long-closed incident, an active incident that started last, and
a group membership without ``added_at``; everything else comes from the domain defaults.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Environment
from benchmark.envs.neobank.common import OKTA_APPS, OKTA_GROUPS, SECURITY_AUDIT, SECURITY_INCIDENTS
from tests.support.envs import Patch, call, failure, stored

DOMAIN = "sandbox_neobank_support_v1"
MARCUS = "marcus.thompson@vdb.com"
UNKNOWN = "nobody@vdb.com"


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def _incident(incident_id: str, reported: str, resolved: str | None) -> dict[str, Any]:
    return {
        "id": incident_id,
        "employee_id": "WD-847291",
        "severity": "SEV3",
        "incident_type": "test",
        "description": f"incident {incident_id}",
        "status": "open" if resolved is None else "closed",
        "is_active": resolved is None,
        "reported_at": reported,
        "reported_by": "WD-753918",
        "resolved_at": resolved,
    }


PATCH: Patch = {
    SECURITY_INCIDENTS: [
        _incident("SEC-RECENT", "2025-12-17T08:00:00Z", "2025-12-17T12:00:00Z"),
        _incident("SEC-OLD", "2025-12-16T08:00:00Z", "2025-12-17T09:59:59Z"),
        _incident("SEC-NEWEST", "2025-12-18T09:00:00Z", None),
    ],
    OKTA_GROUPS: [
        {"id": "OGM-NO-DATE", "employee_id": "WD-847291", "group_name": "oncall", "added_by": "system"},
        {
            "id": "OGM-GONE",
            "employee_id": "WD-847291",
            "group_name": "alumni",
            "added_by": "system",
            "is_active": False,
        },
    ],
}


def test_add_to_group_numbers_from_row_count(env: Environment) -> None:
    count = env.table(OKTA_GROUPS).count()
    out = call(env, "okta_api_add_to_group", {"email": MARCUS, "group_name": "bi_marketing_viewers"})
    new_id = f"OGM-{count + 1:08d}"
    assert out == {"membership_id": new_id}
    assert stored(env, OKTA_GROUPS, new_id) == {
        "id": new_id,
        "employee_id": "WD-847291",
        "group_name": "bi_marketing_viewers",
        "added_at": None,
        "added_by": "system",
        "is_active": True,
    }


def test_add_to_group_refuses_active_member_but_not_former(env: Environment) -> None:
    tool = "okta_api_add_to_group"
    assert call(env, tool, {"email": MARCUS, "group_name": "engineers"}) == failure(
        tool, "Employee is already a member of this group: engineers"
    )
    assert "membership_id" in call(env, tool, {"email": MARCUS, "group_name": "alumni"})
    assert call(env, tool, {"email": UNKNOWN, "group_name": "x"}) == failure(
        tool, f"Employee not found: {UNKNOWN}"
    )


def test_check_access(env: Environment) -> None:
    tool = "okta_api_check_access"
    assert call(env, tool, {"email": MARCUS, "app_name": "Salesforce"}) == {
        "has_access": True,
        "access_level": "read_only",
        "granted_at": "2025-06-15T09:00:00Z",
    }
    assert call(env, tool, {"email": "david.kim@vdb.com", "app_name": "Jira"}) == {"has_access": False}
    assert call(env, tool, {"email": UNKNOWN, "app_name": "Jira"}) == failure(
        tool, f"Employee not found: {UNKNOWN}"
    )


def test_get_user_groups_lists_active_and_drops_missing_dates(env: Environment) -> None:
    tool = "okta_api_get_user_groups"
    assert call(env, tool, {"email": MARCUS}) == {
        "groups": [
            {"group_name": "bi_product_analytics", "added_at": "2025-09-20T11:00:00Z"},
            {"group_name": "engineers", "added_at": "2025-09-15T09:00:00Z"},
            {"group_name": "oncall"},
        ]
    }
    assert call(env, tool, {"email": "david.kim@vdb.com"}) == {"groups": []}
    assert call(env, tool, {"email": UNKNOWN}) == failure(tool, f"Employee not found: {UNKNOWN}")


def test_provision_access_stores_grant(env: Environment) -> None:
    args = {
        "email": "david.kim@vdb.com",
        "app_name": "Jira",
        "access_level": "write non-PII only",
        "is_temporary": True,
        "access_expiry_date": "2025-10-02T13:00:00Z",
    }
    new_id = f"OAA-{env.table(OKTA_APPS).count() + 1:08d}"
    assert call(env, "okta_api_provision_access", args) == {"app_access_id": new_id}
    saved = stored(env, OKTA_APPS, new_id)
    assert saved["employee_id"] == "WD-465782"
    assert saved["access_level"] == "write non-PII only"
    assert (saved["is_temporary"], saved["expires_at"], saved["granted_at"]) == (
        True,
        "2025-10-02T13:00:00Z",
        None,
    )


def test_provision_access_errors(env: Environment) -> None:
    tool = "okta_api_provision_access"
    assert call(env, tool, {"email": MARCUS, "app_name": "GitHub", "access_level": "read_only"}) == failure(
        tool, "Employee already has access to this application: GitHub"
    )
    assert call(env, tool, {"email": UNKNOWN, "app_name": "GitHub", "access_level": "read_only"}) == failure(
        tool, f"Employee not found in Okta directory: {UNKNOWN}"
    )


def test_revoke_access_deactivates_then_refuses(env: Environment) -> None:
    tool = "okta_api_revoke_access"
    assert call(env, tool, {"email": MARCUS, "app_name": "GitHub"}) == {"revoked": True}
    saved = stored(env, OKTA_APPS, "OAA-29638471")
    assert (saved["is_active"], saved["revoked_at"]) == (False, None)
    assert call(env, "okta_api_check_access", {"email": MARCUS, "app_name": "GitHub"}) == {
        "has_access": False
    }
    assert call(env, tool, {"email": MARCUS, "app_name": "GitHub"}) == failure(
        tool, "No active access found to revoke for application: GitHub"
    )


def test_security_action_logs_audit_row(env: Environment) -> None:
    new_id = f"OSA-{env.table(SECURITY_AUDIT).count() + 1:08d}"
    out = call(
        env,
        "okta_security_api_execute_action",
        {"email": MARCUS, "operation": "force_password_reset", "ticket_id": "6", "mfa_device_id": "MFA-1"},
    )
    assert out == {"success": True, "audit_id": new_id}
    assert stored(env, SECURITY_AUDIT, new_id) == {
        "id": new_id,
        "employee_id": "WD-847291",
        "operation": "force_password_reset",
        "performed_by": "system",
        "performed_at": "2025-12-18T10:00:00Z",
        "reason": "Security operation: force_password_reset",
        "ticket_id": "6",
        "verification_method": None,
        "success": True,
        "bypass_duration_hours": None,
        "bypass_expires_at": None,
        "mfa_device_id": None,
    }


def test_security_bypass_expiry_from_frozen_clock(env: Environment) -> None:
    out = call(
        env,
        "okta_security_api_execute_action",
        {
            "email": MARCUS,
            "operation": "set_temporary_bypass",
            "bypass_duration_hours": 4,
            "bypass_expires_at": "2030-01-01T00:00:00Z",
        },
    )
    saved = stored(env, SECURITY_AUDIT, out["audit_id"])
    assert (saved["bypass_duration_hours"], saved["bypass_expires_at"]) == (4, "2025-12-18T14:00:00Z")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"operation": "set_temporary_bypass", "bypass_duration_hours": 5},
            "bypass_duration_hours cannot exceed 4 hours",
        ),
        (
            {"operation": "set_temporary_bypass", "bypass_duration_hours": 0},
            "bypass_duration_hours is required for set_temporary_bypass operation",
        ),
        ({"operation": "remove_mfa_device"}, "mfa_device_id is required for remove_mfa_device operation"),
        (
            {"operation": "unlock_account", "bypass_expires_at": "tomorrow"},
            "Failed to execute security action: Invalid isoformat string: 'tomorrow'",
        ),
    ],
)
def test_security_action_errors_write_nothing(env: Environment, args: dict[str, Any], message: str) -> None:
    tool = "okta_security_api_execute_action"
    before = env.table(SECURITY_AUDIT).count()
    assert call(env, tool, {"email": MARCUS, **args}) == failure(tool, message)
    assert env.table(SECURITY_AUDIT).count() == before
    assert call(env, tool, {"email": UNKNOWN, "operation": "unlock_account"}) == failure(
        tool, f"Employee not found in Okta directory: {UNKNOWN}"
    )


def test_verify_incident_window_and_order(env: Environment) -> None:
    incidents = call(env, "security_api_verify_incident", {})["incidents"]
    ids = [i["incident_id"] for i in incidents]
    assert ids[:2] == ["SEC-NEWEST", "SEC-RECENT"]
    assert "SEC-OLD" not in ids and "SEC-71938462" not in ids
    assert set(ids) > {"SEC-26184759", "SEC-84752619"}
    assert incidents[0] == {
        "incident_id": "SEC-NEWEST",
        "severity": "SEV3",
        "description": "incident SEC-NEWEST",
        "started_at": "2025-12-18T09:00:00+00:00",
        "is_active": True,
    }
    assert incidents[1]["closed_at"] == "2025-12-17T12:00:00+00:00"
    tool = "security_api_verify_incident"
    assert call(env, tool, {"x": 1}) == failure(
        tool, "Input validation failed: x: Extra inputs are not permitted"
    )


def test_get_employee(env: Environment) -> None:
    tool = "workday_api_get_employee"
    assert call(env, tool, {"email": "lisa.chen@vdb.com"}) == {
        "employee_id": "WD-294817",
        "email": "lisa.chen@vdb.com",
        "full_name": "Lisa Chen",
        "level": 9,
        "department": "executive_leadership",
        "role": "Chief Executive Officer",
        "office_location": "sf",
        "start_date": "2018-01-15T00:00:00Z",
        "employment_status": "active",
        "is_contractor": False,
    }
    assert call(env, tool, {"email": UNKNOWN}) == failure(
        tool, f"No employee found with the provided email: {UNKNOWN}"
    )


def test_get_manager_chain(env: Environment) -> None:
    tool = "workday_api_get_manager_chain"
    chain = call(env, tool, {"email": MARCUS})["manager_chain"]
    assert [m["email"] for m in chain] == [
        "sarah.jones@vdb.com",
        "michael.rodriguez@vdb.com",
        "lisa.chen@vdb.com",
    ]
    assert chain[0] == {
        "employee_id": "WD-681453",
        "email": "sarah.jones@vdb.com",
        "full_name": "Sarah Jones",
        "level": 7,
        "department": "product_engineering",
        "role": "Engineering Manager",
    }
    assert call(env, tool, {"email": "lisa.chen@vdb.com"}) == {"manager_chain": []}
    assert call(env, tool, {"email": UNKNOWN}) == failure(tool, f"Employee not found: {UNKNOWN}")


def test_get_org_structure(env: Environment) -> None:
    tool = "workday_api_get_org_structure"
    reports = call(env, tool, {"manager_email": "amanda.lee@vdb.com"})["direct_reports"]
    assert reports == [
        {
            "employee_id": "WD-218647",
            "email": "thomas.white@vdb.com",
            "full_name": "Thomas White",
            "level": 3,
            "department": "it_security",
            "role": "Security Engineer",
            "office_location": "remote",
            "employment_status": "active",
        }
    ]
    assert call(env, tool, {"manager_email": MARCUS}) == {"direct_reports": []}
    assert call(env, tool, {"manager_email": UNKNOWN}) == failure(tool, f"Manager not found: {UNKNOWN}")
