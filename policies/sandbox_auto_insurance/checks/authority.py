"""Authority (at_commit): only the Named Insured or a Co-Insured may make the changes the Authority
Matrix reserves to them.
"""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import TICKETS, _changed, _rows

# -- authority (at_commit) ------------------------------------------------------------------------
# §2.5 Authority Matrix: only the Named Insured or a Co-Insured may add/remove vehicles and drivers,
# request a billing arrangement, cancel or reinstate. The changes that record those actions, and the
# policy each one is about.
AUTHORITY_TABLES = frozenset({"policy_vehicles", "policy_drivers", "billing_billing_accounts"})
CANCEL_OR_REINSTATE = (
    "status",
    "cancellation_date",
    "cancellation_reason",
    "lapse_flag",
    "lapse_start",
    "lapse_end",
)


def _authorized_policies(ctx: CheckContext) -> set[str]:
    policies = set()
    for change in ctx.changes:
        row = change.after or change.before or {}
        if change.table in AUTHORITY_TABLES and row.get("policy_id"):
            policies.add(str(row["policy_id"]))
        elif change.table == "policy_policies" and any(_changed(change, f) for f in CANCEL_OR_REINSTATE):
            policies.add(change.key)
    return policies


def _insured_emails(ctx: CheckContext, policy_id: str) -> set[str]:
    rows = ctx.query(
        "SELECT c.email FROM crm_customers AS c JOIN policy_policies AS p"
        " ON c.id = p.named_insured_id OR c.id = p.co_insured_id WHERE p.id = :policy"
        " UNION SELECT c.email FROM crm_customers AS c JOIN policy_drivers AS d ON c.id = d.customer_id"
        " WHERE d.policy_id = :policy AND (d.is_named_insured = TRUE OR d.is_co_insured = TRUE)",
        {"policy": policy_id},
    )
    return {str(r["email"]).strip().lower() for r in rows}


def requester_may_authorize(ctx: CheckContext) -> list[dict[str, Any]]:
    policies = _authorized_policies(ctx)
    if not policies:
        return []
    out = []
    for change in _rows(ctx, TICKETS):
        requester = (change.after or {}).get("requester_id")
        if requester is None or not _changed(change, "requester_id"):
            continue
        users = ctx.query("SELECT email FROM zendesk_users WHERE id = :id", {"id": str(requester)})
        if not users:
            continue
        email = str(users[0]["email"]).strip().lower()
        for policy_id in sorted(policies):
            if email not in _insured_emails(ctx, policy_id):
                out.append({"ticket_id": change.key, "requester_id": requester, "policy_id": policy_id})
    return out
