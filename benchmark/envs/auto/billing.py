"""Billing account tools.

Every tool works on the first billing account (in store order) whose ``policy_id`` matches: several
accounts can share a policy when a task patches one next to a default row.
"""

from __future__ import annotations

from typing import Any

from benchmark.envs.auto.inputs import (
    BillingCreateInstallmentPlanInput,
    BillingGetAccountDetailsInput,
    BillingGetArrangementHistoryInput,
    BillingGrantExtensionInput,
    BillingResetAccountStatusInput,
)
from benchmark.envs.auto.rows import BillingAccount
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

ACCOUNTS: TableRef[BillingAccount] = TableRef("billing_billing_accounts")


def _account(env: Environment, policy_id: str) -> BillingAccount:
    found = env.table(ACCOUNTS).where(policy_id=policy_id)
    if not found:
        raise ToolError(f"No billing account found for policy_id '{policy_id}'.")
    return found[0]


def _update(env: Environment, account: BillingAccount, changes: dict[str, Any]) -> BillingAccount:
    """Apply field changes through the row model and store them in place."""
    table = env.table(ACCOUNTS)
    updated = table.record({**account.model_dump(), **changes})
    table.save(updated)
    return updated


def billing_get_account_details(env: Environment, args: BillingGetAccountDetailsInput) -> dict[str, Any]:
    """Balance and arrangement summary; the due-date and installment details stay internal."""
    account = _account(env, args.policy_id)
    return {
        "billing_account_id": account.id,
        "policy_id": account.policy_id,
        "status": account.status.value,
        "monthly_payment": account.monthly_payment,
        "past_due_amount": account.past_due_amount,
        "current_due_date": account.current_due_date,
        "payment_received": account.payment_received,
        "arrangement_type": account.arrangement_type.value,
    }


def billing_get_arrangement_history(
    env: Environment, args: BillingGetArrangementHistoryInput
) -> dict[str, Any]:
    """Only the rolling 12-month arrangement counter; the reference keeps no arrangement log."""
    return {"arrangements_12_months": _account(env, args.policy_id).arrangements_12_months}


def billing_create_installment_plan(
    env: Environment, args: BillingCreateInstallmentPlanInput
) -> dict[str, Any]:
    """Stores the caller's plan verbatim (no check against the past-due amount or tier limits)."""
    account = _account(env, args.policy_id)
    updated = _update(
        env,
        account,
        {
            "arrangement_type": "Installment Plan",
            "installment_count": args.installment_count,
            "installment_amount": args.installment_amount,
            "arrangements_12_months": account.arrangements_12_months + 1,
        },
    )
    return {"billing_account_id": updated.id, "arrangements_12_months": updated.arrangements_12_months}


def billing_grant_extension(env: Environment, args: BillingGrantExtensionInput) -> dict[str, Any]:
    """Moves the due date and replaces any installment plan; no eligibility or limit checks."""
    account = _account(env, args.policy_id)
    updated = _update(
        env,
        account,
        {
            "current_due_date": args.new_due_date,
            "new_due_date": args.new_due_date,
            "arrangement_type": "Extension",
            "arrangements_12_months": account.arrangements_12_months + 1,
            "installment_count": None,
            "installment_amount": None,
        },
    )
    return {"billing_account_id": updated.id, "arrangements_12_months": updated.arrangements_12_months}


def billing_reset_account_status(env: Environment, args: BillingResetAccountStatusInput) -> dict[str, Any]:
    """Forgives the past-due balance and drops any arrangement; the arrangement counter is kept."""
    updated = _update(
        env,
        _account(env, args.policy_id),
        {
            "status": "Current",
            "past_due_amount": 0,
            "arrangement_type": "None",
            "new_due_date": None,
            "installment_count": None,
            "installment_amount": None,
        },
    )
    return {"billing_account_id": updated.id, "status": updated.status.value}


TOOLS: dict[str, ToolFn] = {
    "billing_create_installment_plan": billing_create_installment_plan,
    "billing_get_account_details": billing_get_account_details,
    "billing_get_arrangement_history": billing_get_arrangement_history,
    "billing_grant_extension": billing_grant_extension,
    "billing_reset_account_status": billing_reset_account_status,
}

READ_ONLY: frozenset[str] = frozenset({"billing_get_account_details", "billing_get_arrangement_history"})
