"""Zendesk tickets at commit: required fields, outcome and status, ticket types and priorities, one
requester.
"""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    CLAIMS,
    DOCUMENTS,
    HIGH_PRIORITIES,
    REQUIRED_TICKET_FIELDS,
    STATUS_FOR_OUTCOME,
    TICKETS,
    _one,
    _rows,
)


# -- tickets (at_commit) --------------------------------------------------------------------------
def ticket_required_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        missing = [f for f in REQUIRED_TICKET_FIELDS if after.get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


def ticket_outcome_and_category(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        missing = [] if after.get("outcome_summary") else ["outcome_summary"]
        if after.get("status") != "open" and not after.get("request_category"):
            missing.append("request_category")
        if missing:
            out.append({"ticket_id": change.key, "status": after.get("status"), "missing": missing})
    return out


def status_matches_outcome(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        expected = STATUS_FOR_OUTCOME.get(str(after.get("outcome_summary")))
        if expected is not None and after.get("status") != expected:
            out.append(
                {
                    "ticket_id": change.key,
                    "outcome_summary": after.get("outcome_summary"),
                    "status": after.get("status"),
                    "expected": expected,
                }
            )
    return out


def fnol_tickets_incident(ctx: CheckContext) -> list[dict[str, Any]]:
    """Only a session that opens a claim: a ticket coded FNOL without a new claim is an inquiry."""
    if not any(c.op == "insert" for c in _rows(ctx, CLAIMS)):
        return []
    return [
        {
            "ticket_id": c.key,
            "claims_action_type": c.after.get("claims_action_type"),
            "type": c.after.get("type"),
        }
        for c in _rows(ctx, TICKETS)
        if c.after is not None
        and str(c.after.get("claims_action_type") or "").startswith("FNOL")
        and c.after.get("type") != "incident"
    ]


def document_tickets_task(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, DOCUMENTS):
        if change.op != "insert":
            continue
        ticket_id = str((change.after or {}).get("ticket_id"))
        ticket = _one(ctx, "SELECT id, type FROM zendesk_tickets WHERE id = :id", {"id": ticket_id})
        if ticket is not None and ticket["type"] != "task":
            out.append({"ticket_id": ticket_id, "type": ticket["type"], "document_id": change.key})
    return out


_REQUESTER_POLICIES = (
    "SELECT p.id AS policy_id"
    " FROM zendesk_users AS u"
    " JOIN crm_customers AS c ON c.email = u.email"
    " JOIN policy_policies AS p"
    "   ON p.customer_id = c.id OR p.named_insured_id = c.id OR p.co_insured_id = c.id"
    " WHERE u.id = :requester_id"
)
_REQUESTER_ACCOUNTS = (
    "SELECT a.id, a.status"
    " FROM zendesk_users AS u"
    " JOIN crm_customers AS c ON c.email = u.email"
    " JOIN billing_billing_accounts AS a ON a.customer_id = c.id"
    "   OR a.policy_id IN (SELECT p.id FROM policy_policies AS p"
    "                      WHERE p.customer_id = c.id OR p.named_insured_id = c.id"
    "                         OR p.co_insured_id = c.id)"
    " WHERE u.id = :requester_id"
)


def major_claim_ticket_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    major = {
        str(c.after.get("policy_id"))
        for c in _rows(ctx, CLAIMS)
        if c.after is not None and c.op == "insert" and c.after.get("severity") == "Major"
    }
    if not major:
        return []
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        if after.get("request_category") != "Claims" or after.get("priority") in HIGH_PRIORITIES:
            continue
        requester = after.get("requester_id")
        if requester is None:
            continue
        policies = {r["policy_id"] for r in ctx.query(_REQUESTER_POLICIES, {"requester_id": str(requester)})}
        if policies & major:
            out.append(
                {
                    "ticket_id": change.key,
                    "priority": after.get("priority"),
                    "policies": sorted(policies & major),
                }
            )
    return out


def pending_cancellation_ticket_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        if after.get("request_category") != "Billing & Payments" or after.get("priority") in HIGH_PRIORITIES:
            continue
        requester = after.get("requester_id")
        if requester is None:
            continue
        accounts = ctx.query(_REQUESTER_ACCOUNTS, {"requester_id": str(requester)})
        pending = sorted({r["id"] for r in accounts if r["status"] == "Pending Cancellation"})
        if pending:
            out.append(
                {"ticket_id": change.key, "priority": after.get("priority"), "billing_accounts": pending}
            )
    return out


def tickets_one_requester(ctx: CheckContext) -> list[dict[str, Any]]:
    """The tickets the session wrote are its requester's: one requester across all of them."""
    requesters: dict[str, list[str]] = {}
    for change in _rows(ctx, TICKETS):
        requester = (change.after or {}).get("requester_id")
        if requester is not None:
            requesters.setdefault(str(requester), []).append(change.key)
    if len(requesters) <= 1:
        return []
    return [{"requester_id": r, "tickets": keys} for r, keys in sorted(requesters.items())]
