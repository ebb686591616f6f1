"""Zendesk tickets: what a call wrote (after_call), and at commit the session's tickets resolved, with
their booking fields, tags and requester.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

from .lookups import (
    AGENT_ID,
    CATEGORY_TAGS,
    CHECK_IN_TAGS,
    COMMENT_TABLES,
    RESOLVED_STATUSES,
    TICKETS,
    USER_TYPE_TAGS,
    _booking,
    _changed,
    _group,
    _list,
)


# -- Zendesk tickets: what a call wrote (after_call) --------------------------------------------------
def _written_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == TICKETS and change.after is not None:
            yield change


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


def ticket_status_lifecycle(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        status = change.after.get("status")
        if change.op == "insert" and status != "open":
            out.append({"ticket_id": change.key, "status": status, "expected": "open"})
        elif _changed(change, "status") and status == "closed":
            out.append({"ticket_id": change.key, "status": status})
    return out


def no_organization_or_due_date(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assert change.after is not None
        for field in ("organization_id", "due_at"):
            if _changed(change, field) and change.after.get(field) not in (None, ""):
                out.append({"ticket_id": change.key, "field": field, "value": change.after.get(field)})
    return out


def no_problem_type(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "type": "problem"}
        for c in _written_tickets(ctx)
        if c.after is not None and _changed(c, "type") and c.after.get("type") == "problem"
    ]


CREATION_FIELDS = ("subject", "description", "status", "priority", "type", "requester_id", "assignee_id")


def creation_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        if change.op != "insert":
            continue
        assert change.after is not None
        missing = [f for f in CREATION_FIELDS if change.after.get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


# -- Zendesk tickets at commit ------------------------------------------------------------------------
def _agent_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    """Tickets the agent created or changed in the session.

    The hotel escalation tool opens an internal tracking ticket of its own (§4.9.3); it has no
    assignee, while every ticket the agent creates is assigned to the agent (tickets_assigned_to_agent),
    so an inserted ticket without an assignee is the tool's, not the agent's.
    """
    for change in _written_tickets(ctx):
        assert change.after is not None
        if change.op == "update" or change.after.get("assignee_id"):
            yield change


def _tracking_tickets(ctx: CheckContext) -> Iterator[dict[str, Any]]:
    for change in _written_tickets(ctx):
        assert change.after is not None
        if (
            change.op == "insert"
            and not change.after.get("assignee_id")
            and change.after.get("escalation_reason")
        ):
            yield change.after


def _resolved(ctx: CheckContext) -> Iterator[tuple[str, dict[str, Any]]]:
    for change in _agent_tickets(ctx):
        assert change.after is not None
        if change.after.get("status") in RESOLVED_STATUSES:
            yield change.key, change.after


def tickets_resolved(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": (c.after or {}).get("status")}
        for c in _agent_tickets(ctx)
        if (c.after or {}).get("status") not in RESOLVED_STATUSES
    ]


def every_request_has_a_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    if any(True for _ in _agent_tickets(ctx)):
        return []
    return [{"tickets_written": 0, "tables_written": sorted({c.table for c in ctx.changes})}]


def resolution_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        needed = ["request_type_detail"]
        if ticket.get("status") == "solved":
            needed += ["type", "priority", "resolution_action", "refund_amount"]
        missing = [f for f in needed if ticket.get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": key, "status": ticket.get("status"), "missing": missing})
    return out


MODIFY_OR_CANCEL = frozenset(
    {"modify-dates", "modify-guests", "modify-room-type", "modify-board-type", "cancel-booking"}
)


def booking_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    """A resolved ticket about an existing booking carries its hotel_id and booking_value (and the
    check-in date for a modification or cancellation)."""
    out = []
    for key, ticket in _resolved(ctx):
        if _booking(ctx, ticket.get("booking_reference")) is None:
            continue
        needed = ["hotel_id", "booking_value"]
        if ticket.get("request_type_detail") in MODIFY_OR_CANCEL:
            needed.append("check_in_date")
        missing = [f for f in needed if ticket.get(f) in (None, "")]
        if missing:
            out.append(
                {"ticket_id": key, "booking_reference": ticket.get("booking_reference"), "missing": missing}
            )
    return out


def booking_fields_match(ctx: CheckContext) -> list[dict[str, Any]]:
    """hotel_id / corporate_account_id / group_booking_id on a ticket are those of its booking."""
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is None:
            continue
        for field in ("hotel_id", "corporate_account_id", "group_booking_id"):
            given, actual = ticket.get(field), booking.get(field)
            if given not in (None, "") and actual not in (None, "") and given != actual:
                out.append(
                    {
                        "ticket_id": change.key,
                        "booking_reference": ticket.get("booking_reference"),
                        "field": field,
                        "ticket": given,
                        "booking": actual,
                    }
                )
    return out


def group_first_reference(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        group = _group(ctx, ticket.get("group_booking_id"))
        if group is None:
            continue
        refs = [str(r) for r in _list(group.get("booking_references"))]
        if refs and ticket.get("booking_reference") != refs[0]:
            out.append(
                {
                    "ticket_id": change.key,
                    "group_booking_id": ticket.get("group_booking_id"),
                    "booking_reference": ticket.get("booking_reference"),
                    "first_booking_reference": refs[0],
                }
            )
    return out


def _tags(ticket: Mapping[str, Any]) -> list[str]:
    return [str(t) for t in _list(ticket.get("tags"))]


def user_type_tag(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        tags = [t.lower() for t in _tags(ticket)]
        user = [t for t in tags if t in USER_TYPE_TAGS]
        timing = [t for t in tags if t in CHECK_IN_TAGS]
        if len(user) != 1 or len(timing) > 1:
            out.append({"ticket_id": key, "user_type_tags": user, "check_in_tags": timing})
    return out


def tags_from_categories(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        unknown = [t for t in _tags(ticket) if t.lower() not in CATEGORY_TAGS]
        if unknown:
            out.append({"ticket_id": key, "tags": unknown})
    return out


def b2c_tag_matches_booking(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        if "b2c-customer" not in {t.lower() for t in _tags(ticket)}:
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is None:
            continue
        if booking.get("corporate_account_id") or booking.get("group_booking_id"):
            out.append(
                {
                    "ticket_id": key,
                    "booking_reference": booking["booking_reference"],
                    "corporate_account_id": booking.get("corporate_account_id"),
                    "group_booking_id": booking.get("group_booking_id"),
                }
            )
    return out


def requester_is_booking_customer(ctx: CheckContext) -> list[dict[str, Any]]:
    """A traveler's ticket about a booking: its requester is the Zendesk user with the email of the
    booking's customer. Hotel partners, corporate accounts and group coordinators may ask about a
    booking that is not their own, so their tickets are left alone."""
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after or {}
        if not _changed(change, "requester_id") or not ticket.get("requester_id"):
            continue
        if {t.lower() for t in _tags(ticket)} & (USER_TYPE_TAGS - {"b2c-customer"}):
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is None or booking.get("corporate_account_id") or booking.get("group_booking_id"):
            continue
        rows = ctx.query(
            "SELECT u.email AS requester_email, p.email AS customer_email"
            " FROM zendesk_users AS u, crm_api_customer_profiles AS p"
            " WHERE u.id = :requester AND p.customer_id = :customer",
            {"requester": str(ticket["requester_id"]), "customer": str(booking["customer_id"])},
        )
        if (
            rows
            and str(rows[0]["requester_email"]).strip().lower()
            != str(rows[0]["customer_email"]).strip().lower()
        ):
            out.append(
                {
                    "ticket_id": change.key,
                    "requester_id": ticket["requester_id"],
                    "booking_reference": booking["booking_reference"],
                    **rows[0],
                }
            )
    return out
