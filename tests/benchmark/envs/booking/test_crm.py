"""Customer CRM API tools on a real Environment (SQLite in memory).

A small patch over the domain defaults: profile CUS-C1 stored under a different row id, without a
loyalty status, with preferences and a mixed-case email.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Environment
from benchmark.envs.booking import crm
from tests.support.envs import Patch, call, failure, stored

PROFILES = "crm_api_customer_profiles"

PATCH = {
    PROFILES: [
        {
            "id": "CRM-ROW-1",
            "customer_id": "CUS-C1",
            "email": "Casey.Lane@Example.com",
            "full_name": "Casey Lane",
            "vip_tier": "vip",
            "lifetime_value": "1500.50",
            "total_bookings_count": 4,
            "preferences": ["quiet room"],
            "special_notes": ["allergic to feathers"],
            "complaint_count": 1,
            "created_at": "2025-01-01T10:00:00Z",
            "updated_at": "2025-06-01T10:00:00Z",
        }
    ]
}


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def test_check_vip_status_omits_missing_loyalty(env: Environment) -> None:
    assert call(env, "crm_api_check_vip_status", {"customer_id": "CUS-C1"}) == {"vip_tier": "vip"}


@pytest.mark.parametrize(
    ("customer_id", "message"),
    [("CRM-ROW-1", "Customer not found."), ("  ", "Invalid customer_id parameter.")],
)
def test_check_vip_status_errors(env: Environment, customer_id: str, message: str) -> None:
    tool = "crm_api_check_vip_status"
    assert call(env, tool, {"customer_id": customer_id}) == failure(tool, message)


def test_get_customer_preferences(env: Environment) -> None:
    out = call(env, "crm_api_get_customer_preferences", {"customer_id": "CUS-C1"})
    assert out == {"preferences": ["quiet room"], "special_notes": ["allergic to feathers"]}
    tool = "crm_api_get_customer_preferences"
    assert call(env, tool, {"customer_id": "CUS-NO"}) == failure(tool, "Customer not found.")


def test_get_customer_profile_by_id_and_email(env: Environment) -> None:
    by_id = call(env, "crm_api_get_customer_profile", {"customer_id": "CUS-C1"})
    profile = by_id["customer_data"]
    assert profile["id"] == "CRM-ROW-1"
    assert profile["lifetime_value"] == "1500.50"
    assert profile["updated_at"] == "2025-06-01T10:00:00Z"
    assert "loyalty_program_status" not in profile
    assert "last_booking_date" not in profile
    by_email = call(
        env, "crm_api_get_customer_profile", {"customer_id": "", "email": "casey.lane@example.COM"}
    )
    assert by_email == by_id


def test_get_customer_profile_errors(env: Environment) -> None:
    tool = "crm_api_get_customer_profile"
    assert call(env, tool, {}) == failure(tool, "Invalid parameters: provide customer_id or email.")
    assert call(env, tool, {"email": "nobody@example.com"}) == failure(tool, "Customer not found.")


def test_update_customer_info_sets_fields_in_input_order(env: Environment) -> None:
    out = call(
        env,
        "crm_api_update_customer_info",
        {"customer_id": "CUS-C1", "last_booking_date": 12345, "complaint_count": "2", "email": None},
    )
    assert out == {"success": True, "updated_fields": ["complaint_count", "last_booking_date"]}
    row = stored(env, PROFILES, "CRM-ROW-1")
    assert row["complaint_count"] == 2
    assert row["last_booking_date"] == "1970-01-01T03:25:45Z"
    assert row["updated_at"] == "2025-01-01T00:00:00Z"
    assert row["email"] == "Casey.Lane@Example.com"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"customer_id": "CUS-C1"}, "Invalid update_fields parameter."),
        ({"customer_id": "CUS-NO", "complaint_count": 1}, "Customer not found."),
        ({"customer_id": "", "complaint_count": 1}, "Invalid customer_id parameter."),
        (
            {"customer_id": "CUS-C1", "complaint_count": 1, "note": "x"},
            "Input validation failed: note: Extra inputs are not permitted",
        ),
    ],
)
def test_update_customer_info_refusals_write_nothing(
    env: Environment, args: dict[str, Any], message: str
) -> None:
    before = env.state_hash()
    assert call(env, "crm_api_update_customer_info", args) == failure("crm_api_update_customer_info", message)
    assert env.state_hash() == before


def test_read_only_set() -> None:
    assert {
        "crm_api_check_vip_status",
        "crm_api_get_customer_preferences",
        "crm_api_get_customer_profile",
    } == crm.READ_ONLY
