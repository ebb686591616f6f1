"""Auto-insurance billing tools on a real Environment (SQLite in memory), over the domain defaults.

Default accounts used: BILL-000001 (POL-0012345678, past due, 1 arrangement) and BILL-000003
(POL-0099001122, an installment plan with a new due date).
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.envs.auto import billing
from tests.support.envs import call, failed

ACCOUNTS = billing.ACCOUNTS
PAST_DUE_POLICY = "POL-0012345678"
INSTALLMENT_POLICY = "POL-0099001122"


def account(env: Environment, policy_id: str) -> dict[str, Any]:
    return env.table(ACCOUNTS).where(policy_id=policy_id)[0].model_dump(mode="json")


def test_read_only_lists_exactly_the_tools_that_never_write(domain: Domain) -> None:
    assert {"billing_get_account_details", "billing_get_arrangement_history"} == billing.READ_ONLY
    for name in billing.TOOLS:
        assert domain.tools[name].writes == (name not in billing.READ_ONLY)


def test_get_account_details_renders_enum_values_in_output_order(env: Environment) -> None:
    text = env.call_tool("billing_get_account_details", {"policy_id": PAST_DUE_POLICY})
    assert text == (
        '{"billing_account_id": "BILL-000001", "policy_id": "POL-0012345678", "status": "Past Due", '
        '"monthly_payment": 25000, "past_due_amount": 30000, "current_due_date": "2025-01-15", '
        '"payment_received": false, "arrangement_type": "None"}'
    )


def test_lookups_use_the_first_account_of_a_policy(env: Environment) -> None:
    second = {**account(env, PAST_DUE_POLICY), "id": "BILL-PATCHED", "arrangements_12_months": 3}
    env.apply_patch({ACCOUNTS: [second]})
    assert call(env, "billing_get_account_details", {"policy_id": PAST_DUE_POLICY})["billing_account_id"] == (
        "BILL-000001"
    )
    assert call(env, "billing_get_arrangement_history", {"policy_id": PAST_DUE_POLICY}) == {
        "arrangements_12_months": 1
    }


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("billing_get_account_details", {}),
        ("billing_get_arrangement_history", {}),
        ("billing_create_installment_plan", {"installment_count": 2, "installment_amount": 100}),
        ("billing_grant_extension", {"new_due_date": "2025-02-01"}),
        ("billing_reset_account_status", {}),
    ],
)
def test_unknown_policy_is_an_error_and_writes_nothing(
    env: Environment, tool: str, extra: dict[str, Any]
) -> None:
    before = env.state_hash()
    assert (
        failed(env, tool, {"policy_id": "POL-NOPE", **extra})
        == "No billing account found for policy_id 'POL-NOPE'."
    )
    assert env.state_hash() == before


def test_get_arrangement_history_counts_arrangements(env: Environment) -> None:
    assert call(env, "billing_get_arrangement_history", {"policy_id": INSTALLMENT_POLICY}) == {
        "arrangements_12_months": 2
    }


def test_get_arrangement_history_requires_policy_id(env: Environment) -> None:
    assert (
        failed(env, "billing_get_arrangement_history", {})
        == "Input validation failed: policy_id: Field required"
    )


def test_create_installment_plan_stores_plan_and_counts_it(env: Environment) -> None:
    out = call(
        env,
        "billing_create_installment_plan",
        {"policy_id": PAST_DUE_POLICY, "installment_count": "3", "installment_amount": 10000},
    )
    assert out == {"billing_account_id": "BILL-000001", "arrangements_12_months": 2}
    row = account(env, PAST_DUE_POLICY)
    assert row["arrangement_type"] == "Installment Plan"
    assert (row["installment_count"], row["installment_amount"]) == (3, 10000)
    assert row["past_due_amount"] == 30000


def test_create_installment_plan_rejects_non_integer_amount(env: Environment) -> None:
    assert failed(
        env,
        "billing_create_installment_plan",
        {"policy_id": PAST_DUE_POLICY, "installment_count": 2, "installment_amount": "lots"},
    ) == (
        "Input validation failed: installment_amount: Input should be a valid integer, "
        "unable to parse string as an integer"
    )


def test_grant_extension_moves_due_date_and_clears_installments(env: Environment) -> None:
    out = call(
        env, "billing_grant_extension", {"policy_id": INSTALLMENT_POLICY, "new_due_date": "2025-03-01"}
    )
    assert out == {"billing_account_id": "BILL-000003", "arrangements_12_months": 3}
    row = account(env, INSTALLMENT_POLICY)
    assert row["current_due_date"] == row["new_due_date"] == "2025-03-01"
    assert row["arrangement_type"] == "Extension"
    assert row["installment_count"] is None and row["installment_amount"] is None


def test_reset_account_status_forgives_balance_and_keeps_counter(env: Environment) -> None:
    text = env.call_tool("billing_reset_account_status", {"policy_id": INSTALLMENT_POLICY})
    assert text == '{"billing_account_id": "BILL-000003", "status": "Current"}'
    row = account(env, INSTALLMENT_POLICY)
    assert (row["status"], row["past_due_amount"], row["arrangement_type"]) == ("Current", 0, "None")
    assert (row["new_due_date"], row["installment_count"], row["installment_amount"]) == (None, None, None)
    assert row["current_due_date"] == "2024-12-28"
    assert row["arrangements_12_months"] == 2
