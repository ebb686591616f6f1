"""Zendesk tickets at commit: the end state of the session's tickets (entry fields, approvals
recorded, pending while awaiting approval, escalation, priority, one requester).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guard.checks import CheckContext

from .lookups import (
    APPROVALS,
    CREATION_OWNER,
    TEAM_BY_ESCALATION,
    URGENCY_BY_PRIORITY,
    _changed,
    _employee_by_id,
    _ids,
    _inserted,
    _requester_employee,
    _session_tickets,
)

# -- Zendesk tickets: end state of the session's tickets (at_commit) ----------------------------------


def every_request_has_a_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    """Only a session that changed records: a request answered from reads alone may leave its ticket
    as it is (README, "Tried and dropped")."""
    if not ctx.changes or any(True for _ in _session_tickets(ctx)):
        return []
    return [{"tickets_written": 0, "tables_written": sorted({c.table for c in ctx.changes})}]


def no_duplicate_tickets(ctx: CheckContext) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str, str], str] = {}
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        if change.op != "insert":
            continue
        same = (
            str(ticket.get("requester_id")),
            str(ticket.get("type")),
            str(ticket.get("subject")).strip().lower(),
        )
        if same in seen:
            out.append({"ticket_id": change.key, "duplicate_of": seen[same], "requester_id": same[0]})
        else:
            seen[same] = change.key
    return out


def tickets_entry_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        if ticket.get("status") not in {"hold", "pending", "solved"}:
            continue
        missing = [f for f in ("owner", "approval_required") if not ticket.get(f)]
        if missing:
            out.append({"ticket_id": change.key, "status": ticket.get("status"), "missing": missing})
    return out


def tickets_approval_ids_when_required(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        if ticket.get("approval_required") != "yes":
            continue
        missing = [f for f in ("approver_id", "approval_request_ids") if not _ids(ticket.get(f))]
        if missing:
            out.append({"ticket_id": change.key, "approval_required": "yes", "missing": missing})
    return out


def tickets_approval_status_matches(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        required, status = ticket.get("approval_required"), ticket.get("approval_status")
        wrong = (
            (required == "no" and status != "not_required")
            or (required == "yes" and status == "not_required")
            or (status == "pending" and required != "yes")
        )
        if wrong:
            out.append({"ticket_id": change.key, "approval_required": required, "approval_status": status})
    return out


def tickets_approval_records_exist(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        for request_id in _ids(ticket.get("approval_request_ids")):
            if not ctx.query(
                "SELECT r.id"
                " FROM sandbox_neobank_support_main_models_approval_requests AS r"
                " WHERE r.id = :id",
                {"id": request_id},
            ):
                out.append({"ticket_id": change.key, "approval_request_id": request_id, "exists": False})
        for approver in _ids(ticket.get("approver_id")):
            if _employee_by_id(ctx, approver) is None:
                out.append({"ticket_id": change.key, "approver_id": approver, "exists": False})
    return out


def _ticket(ctx: CheckContext, ticket_id: Any) -> dict[str, Any] | None:
    if ticket_id is None:
        return None
    rows = ctx.query("SELECT * FROM zendesk_tickets AS t WHERE t.id = :id", {"id": str(ticket_id)})
    return rows[0] if rows else None


def approvals_recorded_on_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    """Every approval request the session created is documented on a ticket marked approval_required."""
    tickets = [c.after or {} for c in _session_tickets(ctx)]
    out = []
    for request in _inserted(ctx, APPROVALS):
        documented = [t for t in tickets if request["id"] in _ids(t.get("approval_request_ids"))]
        if not documented:
            out.append({"approval_request_id": request["id"], "ticket_id": request.get("ticket_id")})
        elif not any(t.get("approval_required") == "yes" for t in documented):
            out.append(
                {
                    "approval_request_id": request["id"],
                    "ticket_id": documented[0].get("id"),
                    "approval_required": documented[0].get("approval_required"),
                }
            )
    return out


def approvals_urgency_matches_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for request in _inserted(ctx, APPROVALS):
        ticket = _ticket(ctx, request.get("ticket_id"))
        if ticket is None or ticket.get("priority") not in URGENCY_BY_PRIORITY:
            continue
        expected = URGENCY_BY_PRIORITY[ticket["priority"]]
        if request.get("urgency") != expected:
            out.append(
                {
                    "approval_request_id": request["id"],
                    "urgency": request.get("urgency"),
                    "ticket_id": ticket["id"],
                    "priority": ticket["priority"],
                    "expected": expected,
                }
            )
    return out


def _pending_approvals(ctx: CheckContext, ticket: Mapping[str, Any]) -> list[str]:
    rows = ctx.query(
        "SELECT r.id, r.status"
        " FROM sandbox_neobank_support_main_models_approval_requests AS r"
        " WHERE r.ticket_id = :ticket_id",
        {"ticket_id": str(ticket.get("id"))},
    )
    for request_id in _ids(ticket.get("approval_request_ids")):
        rows += ctx.query(
            "SELECT r.id, r.status"
            " FROM sandbox_neobank_support_main_models_approval_requests AS r"
            " WHERE r.id = :id",
            {"id": request_id},
        )
    return sorted({r["id"] for r in rows if r["status"] == "pending"})


def tickets_not_solved_while_pending(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        if ticket.get("status") != "solved":
            continue
        pending = _pending_approvals(ctx, ticket)
        if pending:
            out.append({"ticket_id": change.key, "status": "solved", "pending_approval_requests": pending})
    return out


def tickets_pending_while_awaiting_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    """A ticket whose approval requests were created in this session waits in pending / pending."""
    created = {r["id"] for r in _inserted(ctx, APPROVALS)}
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        linked = set(_ids(ticket.get("approval_request_ids"))) & created
        if not linked:
            continue
        if ticket.get("status") != "pending" or ticket.get("approval_status") != "pending":
            out.append(
                {
                    "ticket_id": change.key,
                    "status": ticket.get("status"),
                    "approval_status": ticket.get("approval_status"),
                    "approval_request_ids": sorted(linked),
                }
            )
    return out


def tickets_incident_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        if ticket.get("type") != "incident":
            continue
        missing = [f for f in ("incident_severity", "customer_impact") if not ticket.get(f)]
        if missing:
            out.append({"ticket_id": change.key, "type": "incident", "missing": missing})
    return out


def tickets_escalation(ctx: CheckContext) -> list[dict[str, Any]]:
    """A ticket the session handed to a team (owner changed away from it_support) waits in pending."""
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        owner = ticket.get("owner")
        if not owner or owner == CREATION_OWNER or not _changed(change, "owner"):
            continue
        tags = {str(t) for t in ticket.get("tags") or []}
        if ticket.get("status") != "pending" or "escalated" not in tags:
            out.append(
                {
                    "ticket_id": change.key,
                    "owner": owner,
                    "status": ticket.get("status"),
                    "tags": sorted(tags),
                }
            )
    return out


def tickets_escalation_category_owner(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        team = TEAM_BY_ESCALATION.get(str(ticket.get("resolution_category")))
        if team is not None and ticket.get("owner") != team:
            out.append(
                {
                    "ticket_id": change.key,
                    "resolution_category": ticket.get("resolution_category"),
                    "owner": ticket.get("owner"),
                    "expected_owner": team,
                }
            )
    return out


def tickets_question_low(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "type": "question", "priority": (c.after or {}).get("priority")}
        for c in _session_tickets(ctx)
        if (c.after or {}).get("type") == "question" and (c.after or {}).get("priority") != "low"
    ]


def tickets_executive_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _session_tickets(ctx):
        ticket = change.after or {}
        if ticket.get("type") == "question":
            continue
        requester = _requester_employee(ctx, ticket)
        if requester is None or requester.get("department") != "executive_leadership":
            continue
        if ticket.get("priority") not in {"high", "urgent"}:
            out.append(
                {"ticket_id": change.key, "requester": requester["id"], "priority": ticket.get("priority")}
            )
    return out


def tickets_one_requester(ctx: CheckContext) -> list[dict[str, Any]]:
    """The tickets the session wrote are its requester's: one requester across all of them."""
    requesters: dict[str, list[str]] = {}
    for change in _session_tickets(ctx):
        requester = (change.after or {}).get("requester_id")
        if requester is not None:
            requesters.setdefault(str(requester), []).append(change.key)
    if len(requesters) <= 1:
        return []
    return [{"requester_id": r, "tickets": keys} for r, keys in sorted(requesters.items())]
