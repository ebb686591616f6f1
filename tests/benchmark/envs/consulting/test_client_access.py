"""Consulting client-access tools (VPN/client systems, background checks, NDAs, Box) on a real Environment."""

from __future__ import annotations

import datetime as dt

from benchmark.envs import Environment
from tests.support.envs import call, error_of, record, records, stored_rows

DOMAIN = "sandbox_consulting"
VPN = "client_access_vpn_access"
SYSTEMS = "client_access_client_system_access"
CLEARANCES = "client_access_clearance_record"
NDAS = "client_access_nda_record"
CLIENTS = "salesforce_crm_clients"
ENROLLMENTS = "degreed_training_enrollments"
FOLDERS = "box_folders"
FOLDER_LOGS = "box_folder_access_logs"


# --- client access ------------------------------------------------------------------------------


def test_vpn_provision_check_and_revoke(env: Environment) -> None:
    email = "vpn.tester@msg.com"
    assert call(env, "client_access_api", {"action": "provision_vpn", "email": email}) == {"success": True}
    assert call(
        env, "client_access_api", {"action": "provision_vpn", "email": email, "client_id": "CLT-A"}
    ) == {"success": True}
    assert call(
        env, "client_access_api", {"action": "provision_vpn", "email": email, "client_id": "CLT-A"}
    ) == {"success": True}
    ids = [v["id"] for v in records(env, VPN) if v["employee_email"] == email]
    assert ids == ["VPN-2-000000", "VPN-2-000001", "VPN-2-000002"]
    active = call(env, "client_access_api", {"action": "check_vpn_access", "email": email})
    assert active["vpn_access"][:2] == [
        {"id": "VPN-2-000000", "employee_email": email},
        {"id": "VPN-2-000001", "employee_email": email, "client_id": "CLT-A"},
    ]

    revoke = {"action": "revoke_vpn", "email": email, "client_id": "CLT-A"}
    assert call(env, "client_access_api", revoke) == {"success": True}
    revoked = {v["id"]: v["revoked_at"] for v in records(env, VPN) if v["employee_email"] == email}
    frozen = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
    assert revoked == {"VPN-2-000000": None, "VPN-2-000001": frozen, "VPN-2-000002": None}

    assert call(env, "client_access_api", {"action": "revoke_vpn", "email": email}) == {"success": True}
    assert all(v["revoked_at"] == frozen for v in records(env, VPN) if v["employee_email"] == email)
    assert call(env, "client_access_api", {"action": "check_vpn_access", "email": email}) == {
        "vpn_access": []
    }


def test_client_system_requirements_and_prerequisites(env: Environment) -> None:
    email = "cs.tester@msg.com"
    env.apply_patch(
        {
            CLIENTS: [
                {
                    "id": "CLT-T1",
                    "name": "Client",
                    "clearance_level": "high_security",
                    "required_training_courses": ["CRS-T1"],
                }
            ],
            CLEARANCES: [{"employee_email": email, "clearance_level": "standard", "status": "cleared"}],
            NDAS: [{"employee_email": email, "client_id": "CLT-T1", "status": "sent_for_signature"}],
            ENROLLMENTS: [
                {
                    "id": "ENR-T1",
                    "employee_email": email,
                    "course_id": "CRS-T1",
                    "completion_date": "2025-07-01",
                },
                {"id": "ENR-T2", "employee_email": email, "course_id": "CRS-T2", "completion_date": None},
            ],
        }
    )
    assert call(env, "client_access_api", {"action": "check_client_requirements", "client_id": "CLT-T1"}) == {
        "requirements": {
            "clearance_level": "high_security",
            "requires_nda": True,
            "required_training_courses": ["CRS-T1"],
        }
    }
    prereq = {"action": "get_employee_prerequisites", "email": email, "client_id": "CLT-T1"}
    assert call(env, "client_access_api", prereq) == {
        "clearance_status": "cleared",
        "nda_status": "sent_for_signature",
        "completed_training_courses": ["CRS-T1"],
    }
    assert call(env, "client_access_api", {**prereq, "email": "nobody@msg.com"}) == {
        "clearance_status": "not_initiated",
        "nda_status": "not_signed",
        "completed_training_courses": [],
    }
    provision = {
        "action": "provision_client_system",
        "email": email,
        "client_id": "CLT-T1",
        "system_name": "Client Salesforce",
        "access_type": "read_only",
    }
    assert call(env, "client_access_api", provision) == {"success": True}
    row = record(env, SYSTEMS, "CSA-2-000000")
    assert (
        row["employee_email"],
        row["client_id"],
        row["system_name"],
        row["access_type"].value,
        row["revoked_at"],
    ) == (
        email,
        "CLT-T1",
        "Client Salesforce",
        "read_only",
        None,
    )


def test_client_access_errors(env: Environment) -> None:
    count = env.table(SYSTEMS).count()
    partial = {
        "action": "provision_client_system",
        "email": "a@msg.com",
        "client_id": "C",
        "system_name": "S",
    }
    assert (
        error_of(env, "client_access_api", partial)
        == "Tool execution failed: Missing required parameter: access_type"
    )
    assert env.table(SYSTEMS).count() == count
    assert error_of(
        env, "client_access_api", {"action": "check_client_requirements", "client_id": "NOPE"}
    ) == ("Tool execution failed: Client not found: NOPE")
    assert error_of(env, "client_access_api", {"action": "revoke_vpn"}) == (
        "Tool execution failed: Missing required parameter: email"
    )


# --- background checks --------------------------------------------------------------------------


def test_background_check_initiate_upserts_by_email(env: Environment) -> None:
    existing = "bg.existing@msg.com"
    env.apply_patch(
        {CLEARANCES: [{"employee_email": existing, "clearance_level": "standard", "status": "cleared"}]}
    )
    count = env.table(CLEARANCES).count()

    initiate = {"action": "initiate", "email": existing, "clearance_level": "high_security"}
    assert call(env, "background_check_api", initiate) == {"success": True}
    assert env.table(CLEARANCES).count() == count
    assert call(env, "background_check_api", {"action": "get_status", "email": existing}) == {
        "clearance_data": {"clearance_level": "high_security", "status": "in_progress"}
    }

    assert call(env, "background_check_api", {**initiate, "email": "bg.new@msg.com"}) == {"success": True}
    rows = stored_rows(env, CLEARANCES)
    assert len(rows) == count + 1
    assert rows[-1] == {
        "employee_email": "bg.new@msg.com",
        "clearance_level": "high_security",
        "status": "in_progress",
    }


def test_background_check_defaults_timeline_and_errors(env: Environment) -> None:
    assert call(env, "background_check_api", {"action": "get_status", "email": "nobody@msg.com"}) == {
        "clearance_data": {"clearance_level": "standard", "status": "not_initiated"}
    }
    timeline = {"action": "get_timeline", "clearance_level": "standard"}
    assert call(env, "background_check_api", timeline) == {"estimated_days": 14}
    assert call(env, "background_check_api", {**timeline, "clearance_level": "high_security"}) == {
        "estimated_days": 28
    }
    count = env.table(CLEARANCES).count()
    assert error_of(env, "background_check_api", {"action": "initiate", "email": "a@msg.com"}) == (
        "Tool execution failed: Missing required parameter: clearance_level"
    )
    assert env.table(CLEARANCES).count() == count
    assert error_of(
        env, "background_check_api", {"action": "get_timeline", "clearance_level": "top_secret"}
    ).startswith("Tool execution failed: Input validation failed: clearance_level: Input should be")


# --- NDAs ---------------------------------------------------------------------------------------


def test_nda_status_and_send_for_signature(env: Environment) -> None:
    email = "nda.tester@msg.com"
    env.apply_patch({NDAS: [{"employee_email": email, "client_id": "CLT-S", "status": "signed"}]})
    check = {"action": "check_status", "email": email, "client_id": "CLT-S"}
    assert call(env, "nda_api", check) == {"signed": True, "nda_data": {"status": "signed"}}
    assert call(env, "nda_api", {**check, "client_id": "CLT-N"}) == {
        "signed": False,
        "nda_data": {"status": "not_signed"},
    }

    count = env.table(NDAS).count()
    send = {"action": "send_for_signature", "email": email, "client_id": "CLT-S"}
    assert call(env, "nda_api", send) == {"success": True}
    assert env.table(NDAS).count() == count
    assert record(env, NDAS, f"{email}:CLT-S")["status"].value == "sent_for_signature"

    assert call(env, "nda_api", {**send, "client_id": "CLT-N"}) == {"success": True}
    rows = records(env, NDAS)
    assert len(rows) == count + 1
    assert (rows[-1]["employee_email"], rows[-1]["client_id"], rows[-1]["status"].value) == (
        email,
        "CLT-N",
        "sent_for_signature",
    )
    assert call(env, "nda_api", {**check, "client_id": "CLT-N"}) == {
        "signed": False,
        "nda_data": {"status": "sent_for_signature"},
    }


def test_nda_errors(env: Environment) -> None:
    count = env.table(NDAS).count()
    assert error_of(env, "nda_api", {"action": "send_for_signature", "email": "a@msg.com"}) == (
        "Tool execution failed: Missing required parameter: client_id"
    )
    assert env.table(NDAS).count() == count
    assert error_of(env, "nda_api", {"action": "check_status", "email": "a@msg.com", "client_id": 7}) == (
        "Tool execution failed: Input validation failed: client_id: Input should be a valid string"
    )


# --- Box ----------------------------------------------------------------------------------------


def test_box_folder_details_and_grant(env: Environment) -> None:
    env.apply_patch(
        {
            FOLDERS: [
                {
                    "id": "FLD-T1",
                    "folder_name": "Client docs",
                    "confidentiality_level": "client_confidential",
                    "owner_email": "owner@msg.com",
                    "client_id": "CLT-T1",
                }
            ]
        }
    )
    assert call(env, "box_api", {"action": "get_folder_details", "folder_id": "FLD-T1"}) == {
        "folder_data": {
            "id": "FLD-T1",
            "folder_name": "Client docs",
            "confidentiality_level": "client_confidential",
            "owner_email": "owner@msg.com",
            "client_id": "CLT-T1",
        }
    }
    grant = {
        "action": "grant_folder_access",
        "folder_id": "FLD-T1",
        "email": "g@msg.com",
        "permission_level": "editor",
    }
    assert call(env, "box_api", grant) == {"success": True}
    assert call(env, "box_api", grant) == {"success": True}
    first, second = record(env, FOLDER_LOGS, "FAL-2-000000"), record(env, FOLDER_LOGS, "FAL-2-000001")
    assert (first["folder_id"], first["employee_email"], first["permission_level"].value) == (
        "FLD-T1",
        "g@msg.com",
        "editor",
    )
    assert second is not None


def test_box_errors(env: Environment) -> None:
    grant = {
        "action": "grant_folder_access",
        "folder_id": "NOPE",
        "email": "g@msg.com",
        "permission_level": "viewer",
    }
    assert error_of(env, "box_api", grant) == "Tool execution failed: Folder not found: NOPE"
    assert not env.table(FOLDER_LOGS).exists("FAL-2-000000")
    assert error_of(env, "box_api", {"action": "grant_folder_access", "folder_id": "F"}) == (
        "Tool execution failed: Missing required parameter: email"
    )
    assert error_of(env, "box_api", {"action": "get_folder_details"}) == (
        "Tool execution failed: Missing required parameter: folder_id"
    )
