"""Retail customer, membership and promotion tools on a real Environment (SQLite in memory).

Most cases run on the domain defaults (3 customer profiles, 2 memberships, 4 promotions, 4 discount
applications) plus small patches; one runs on a task whose patch holds an active membership.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.envs.retail import customers
from benchmark.tasks import Task
from tests.support.envs import call, failed, stored

PROFILES = customers.PROFILES
MEMBERSHIPS = customers.MEMBERSHIPS


def test_read_only_lists_exactly_the_tools_that_never_write(retail: Domain) -> None:
    assert set(customers.TOOLS) - customers.READ_ONLY == {"add_points_to_balance", "update_membership_status"}
    for name in customers.TOOLS:
        assert retail.tools[name].writes == (name not in customers.READ_ONLY)


def test_get_discount_application_found(env: Environment) -> None:
    out = call(env, "get_discount_application", {"order_id": "ORD-10012347"})
    assert out == {
        "discount_app_id": "DSC-10000003",
        "order_id": "ORD-10012347",
        "promo_code_used": "TECH15",
        "points_used": 200,
        "loyalty_discount_applied": True,
        "total_discount_amount": 95.0,
        "stacking_rule_applied": "promo_code_and_points_and_loyalty_stacked",
    }


def test_get_discount_application_missing_order_gives_empty_application(env: Environment) -> None:
    text = env.call_tool("get_discount_application", {"order_id": "ORD-NOPE"})
    assert text == (
        '{"discount_app_id": "", "order_id": "ORD-NOPE", "points_used": 0, '
        '"loyalty_discount_applied": false, "total_discount_amount": 0.0}'
    )


def test_get_discount_application_rejects_extra_argument(env: Environment) -> None:
    assert (
        failed(env, "get_discount_application", {"order_id": "ORD-1", "x": 1})
        == "Input validation failed: x: Extra inputs are not permitted"
    )


def test_get_promotion_details_valid_at_frozen_instant(env: Environment) -> None:
    text = env.call_tool("get_promotion_details", {"promo_code": "WELCOME10"})
    assert text == (
        '{"promo_id": "PRM-10000004", "promo_code": "WELCOME10", "discount_type": "percentage", '
        '"discount_value": 10.0, "stackable_with_points": true, "stackable_with_loyalty": true, '
        '"valid_from": "2024-01-01T00:00:00+00:00", "valid_until": "2025-12-31T23:59:59+00:00"}'
    )


@pytest.mark.parametrize("code", ["SAVE20", "welcome10", "NOPE"])
def test_get_promotion_details_expired_wrong_case_or_unknown(env: Environment, code: str) -> None:
    assert (
        failed(env, "get_promotion_details", {"promo_code": code})
        == f"Promotion code not found or expired: {code}"
    )


def test_get_promotion_details_window_is_checked_against_frozen_now(env: Environment) -> None:
    env.apply_patch(
        {
            "external_retail_toolset_promo_models_active_promotions": [
                {
                    "id": "PRM-T1",
                    "promo_code": "LATER",
                    "discount_type": "bogo",
                    "discount_value": 1,
                    "valid_from": "2025-10-01T13:00:01Z",
                    "valid_until": "2026-01-01T00:00:00Z",
                },
                {
                    "id": "PRM-T2",
                    "promo_code": "NOW",
                    "discount_type": "bogo",
                    "discount_value": 1,
                    "valid_from": "2025-10-01T13:00:00Z",
                    "valid_until": "2025-10-01T13:00:00Z",
                },
            ]
        }
    )
    assert "error" in call(env, "get_promotion_details", {"promo_code": "LATER"})
    assert call(env, "get_promotion_details", {"promo_code": "NOW"})["promo_id"] == "PRM-T2"


def test_add_points_to_balance_credits_and_debits(env: Environment) -> None:
    out = call(
        env,
        "add_points_to_balance",
        {"customer_id": "CUS-10000001", "points_to_add": 500, "points_reason": "service_recovery"},
    )
    assert out == {
        "customer_id": "CUS-10000001",
        "old_balance": 2500,
        "points_added": 500,
        "new_balance": 3000,
    }
    out = call(
        env,
        "add_points_to_balance",
        {"customer_id": "CUS-10000001", "points_to_add": -4000, "points_reason": "manual_adjustment"},
    )
    assert out["new_balance"] == -1000
    assert stored(env, MEMBERSHIPS, "MEM-10000001")["points_balance"] == -1000


def test_add_points_to_balance_without_membership_changes_nothing(env: Environment) -> None:
    before = env.state_hash()
    assert failed(
        env,
        "add_points_to_balance",
        {"customer_id": "CUS-10000002", "points_to_add": "500", "points_reason": "refund_return"},
    ) == (
        "No membership record found for customer CUS-10000002. "
        "Customer must have a membership record to receive points."
    )
    assert env.state_hash() == before


def test_get_customer_profile_by_id_renders_iso_offsets_and_enum_values(env: Environment) -> None:
    text = env.call_tool("get_customer_profile", {"customer_id": "CUS-10000003"})
    assert text == (
        '{"id": "CUS-10000003", "email": "bob.wilson@example.com", "name": "Bob Wilson", '
        '"phone": "+1-555-0125", "registration_date": "2022-06-10T09:00:00+00:00", "customer_tier": "vip", '
        '"lifetime_value": 5200.75, "total_orders": 22, "customer_score": 92, '
        '"behavioral_segment": "regular", "acquisition_source": "referral", "discount_usage_rate": 0.2}'
    )


def test_get_customer_profile_by_email_takes_the_first_match_and_drops_nulls(env: Environment) -> None:
    env.apply_patch(
        {
            PROFILES: [
                {
                    "id": "CUS-T1",
                    "email": "jane.doe@example.com",
                    "name": "Other Jane",
                    "registration_date": "2024-01-01T00:00:00Z",
                }
            ]
        }
    )
    assert call(env, "get_customer_profile", {"email": "jane.doe@example.com"})["id"] == "CUS-10000002"
    env.apply_patch(
        {
            PROFILES: [
                {
                    "id": "CUS-T2",
                    "email": "solo@example.com",
                    "name": "Solo",
                    "registration_date": "2024-01-01T00:00:00Z",
                }
            ]
        }
    )
    out = call(env, "get_customer_profile", {"email": "solo@example.com"})
    assert "phone" not in out and "acquisition_source" not in out
    assert out["customer_tier"] == "standard" and out["lifetime_value"] == 0.0


def test_get_customer_profile_id_wins_over_email(env: Environment) -> None:
    out = call(
        env, "get_customer_profile", {"customer_id": "CUS-10000001", "email": "bob.wilson@example.com"}
    )
    assert out["id"] == "CUS-10000001"


def test_get_customer_profile_errors(env: Environment) -> None:
    assert failed(env, "get_customer_profile", {}) == "Either customer_id or email must be provided"
    assert (
        failed(env, "get_customer_profile", {"email": "x@y.z"})
        == "Customer not found with provided identifier: x@y.z"
    )
    assert (
        failed(env, "get_customer_profile", {"customer_id": "CUS-NOPE"})
        == "Customer not found with provided identifier: CUS-NOPE"
    )


def test_get_membership_details_returns_only_active_records(env: Environment) -> None:
    out = call(env, "get_membership_details", {"customer_id": "CUS-10000003"})
    assert out == {
        "membership_id": "MEM-10000002",
        "customer_id": "CUS-10000003",
        "membership_type": "plus",
        "start_date": "2024-01-01T00:00:00+00:00",
        "end_date": "2024-12-31T23:59:59+00:00",
        "status": "active",
        "points_balance": 8500,
    }
    env.apply_patch(
        {
            MEMBERSHIPS: [
                {
                    "id": "MEM-T1",
                    "customer_id": "CUS-10000002",
                    "status": "cancelled",
                    "start_date": "2024-01-01T00:00:00Z",
                    "end_date": "2025-01-01T00:00:00Z",
                }
            ]
        }
    )
    assert (
        failed(env, "get_membership_details", {"customer_id": "CUS-10000002"})
        == "No active membership found for customer: CUS-10000002"
    )


def test_upgrade_creates_first_free_membership_id_and_sets_tier(env: Environment) -> None:
    env.apply_patch(
        {
            MEMBERSHIPS: [
                {
                    "id": "MEM-20000001",
                    "customer_id": "CUS-10000003",
                    "start_date": "2024-01-01T00:00:00Z",
                    "end_date": "2025-01-01T00:00:00Z",
                }
            ]
        }
    )
    text = env.call_tool(
        "update_membership_status",
        {"customer_id": "CUS-10000002", "action": "upgrade", "membership_type": "plus"},
    )
    assert text == (
        '{"customer_id": "CUS-10000002", "membership_id": "MEM-20000002", "new_tier": "plus_member", '
        '"action_completed": "upgraded", "start_date": "2025-10-01T00:00:00+00:00", '
        '"end_date": "2026-10-01T23:59:59.999999+00:00"}'
    )
    assert stored(env, MEMBERSHIPS, "MEM-20000002") == {
        "id": "MEM-20000002",
        "customer_id": "CUS-10000002",
        "membership_type": "plus",
        "start_date": "2025-10-01T00:00:00Z",
        "end_date": "2026-10-01T23:59:59.999999Z",
        "status": "active",
        "points_balance": 0,
    }
    assert stored(env, PROFILES, "CUS-10000002")["customer_tier"] == "plus_member"
    again = call(
        env,
        "update_membership_status",
        {"customer_id": "CUS-10000002", "action": "upgrade", "membership_type": "plus"},
    )
    assert again["membership_id"] == "MEM-20000003"


def test_upgrade_errors_change_nothing(env: Environment) -> None:
    before = env.state_hash()
    assert (
        failed(
            env,
            "update_membership_status",
            {"customer_id": "CUS-NOPE", "action": "upgrade", "membership_type": "plus"},
        )
        == "Customer not found: CUS-NOPE"
    )
    assert "error" in call(
        env, "update_membership_status", {"customer_id": "CUS-10000002", "action": "upgrade"}
    )
    assert env.state_hash() == before


def test_cancel_without_membership_record(env: Environment) -> None:
    assert (
        failed(env, "update_membership_status", {"customer_id": "CUS-10000002", "action": "cancel"})
        == "No membership record found for customer: CUS-10000002"
    )


def _task_with_active_membership(tasks: list[Task]) -> tuple[Task, dict[str, Any]]:
    """A task whose patch holds an active membership of a patched customer profile."""
    for task in tasks:
        profiles = {row["id"]: row for row in task.data_patch.get(PROFILES, [])}
        for row in task.data_patch.get(MEMBERSHIPS, []):
            if row.get("status", "active") == "active" and row["customer_id"] in profiles:
                return task, row
    raise LookupError("no task with an active membership")


def test_cancel_on_task_state(retail: Domain, retail_tasks: list[Task]) -> None:
    task, membership = _task_with_active_membership(retail_tasks)
    customer_id = membership["customer_id"]
    with Environment(retail, Database()) as env:
        env.apply_patch(task.data_patch)
        assert (
            call(env, "get_membership_details", {"customer_id": customer_id})["membership_id"]
            == membership["id"]
        )
        out = call(env, "update_membership_status", {"customer_id": customer_id, "action": "cancel"})
        assert out == {"customer_id": customer_id, "new_tier": "standard", "action_completed": "cancelled"}
        assert stored(env, MEMBERSHIPS, membership["id"])["status"] == "cancelled"
        assert stored(env, PROFILES, customer_id)["customer_tier"] == "standard"
        assert "error" in call(env, "get_membership_details", {"customer_id": customer_id})
        again = call(env, "update_membership_status", {"customer_id": customer_id, "action": "cancel"})
        assert again["action_completed"] == "cancelled"
