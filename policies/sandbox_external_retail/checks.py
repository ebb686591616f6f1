"""Python checks of the retail pack: ticket rules that read the row-level change set of a call.

SQL checks see the state; these also need to know which rows the call (or the session) changed, so
that tickets already in the helpdesk before the session, which the agent did not touch, are not
judged. Each function receives a :class:`guard.checks.CheckContext` and returns violating rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

TICKETS = "zendesk_tickets"
COMMENT_TABLES = frozenset({"zendesk_comments", "zendesk_ticket_comments"})
AGENT_ID = "2"
SYSTEM_STATUSES = frozenset({"new", "closed"})
RESOLVED_STATUSES = frozenset({"pending", "hold", "solved"})


def _written_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == TICKETS and change.after is not None:
            yield change


def _changed(change: RowChange, field: str) -> bool:
    before = change.before or {}
    after = change.after or {}
    return change.op == "insert" or before.get(field) != after.get(field)


def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def tickets_assigned_to_agent(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        assignee = change.after.get("assignee_id")
        if _changed(change, "assignee_id") and str(assignee) != AGENT_ID:
            out.append({"ticket_id": change.key, "assignee_id": assignee})
    return out


def ticket_statuses(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        status = change.after.get("status")
        if change.op == "insert" and status != "open":
            out.append({"ticket_id": change.key, "status": status, "expected": "open"})
        elif _changed(change, "status") and status in SYSTEM_STATUSES:
            out.append({"ticket_id": change.key, "status": status})
    return out


def tickets_resolved(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": c.after.get("status")}
        for c in _written_tickets(ctx)
        if c.after is not None and c.after.get("status") not in RESOLVED_STATUSES
    ]


_REQUESTER_TIER = (
    "SELECT p.customer_tier"
    " FROM zendesk_users AS u"
    " JOIN external_retail_toolset_salesforce_models_customer_profiles AS p ON p.email = u.email"
    " WHERE u.id = :requester_id"
)


def vip_tickets_urgent(ctx: CheckContext) -> list[dict[str, Any]]:
    """Tickets the session wrote whose requester is a VIP customer (Zendesk user ↔ profile by email)."""
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        requester = change.after.get("requester_id")
        if requester is None:
            continue
        rows = ctx.query(_REQUESTER_TIER, {"requester_id": str(requester)})
        priority = change.after.get("priority")
        if any(r["customer_tier"] == "vip" for r in rows) and priority != "urgent":
            out.append({"ticket_id": change.key, "requester_id": requester, "priority": priority})
    return out


def interaction_documented(ctx: CheckContext) -> list[dict[str, Any]]:
    """A session that changed records created or updated at least one ticket (the interaction is
    documented). A session that changed nothing here commits nothing here, so there is nothing to
    document on this upstream (another upstream of the same proxy session may hold its work)."""
    if not ctx.changes or any(True for _ in _written_tickets(ctx)):
        return []
    return [{"tickets_written": 0, "tables_written": sorted({c.table for c in ctx.changes})}]
