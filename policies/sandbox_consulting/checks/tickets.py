"""Zendesk tickets: what one call wrote (after_call)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

from .lookups import (
    AGENT_ID,
    COMMENT_TABLES,
    CUSTOM_FIELD_FORMATS,
    EMAIL,
    TICKETS,
    _engagement_valid,
    _list,
    _requester_email,
)


# -- tickets: what one call wrote -----------------------------------------------------------------
def _written_tickets(ctx: CheckContext) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == TICKETS and change.after is not None:
            yield change


def _changed(change: RowChange, field: str) -> bool:
    before = change.before or {}
    after = change.after or {}
    return change.op == "insert" or before.get(field) != after.get(field)


def _set(change: RowChange, field: str) -> Any:
    """The field's new value when the change set it (None when unchanged or cleared)."""
    return (change.after or {}).get(field) if _changed(change, field) else None


def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def tickets_created_open(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": (c.after or {}).get("status"), "expected": "open"}
        for c in _written_tickets(ctx)
        if c.op == "insert" and (c.after or {}).get("status") != "open"
    ]


def tickets_never_closed(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": "closed"}
        for c in _written_tickets(ctx)
        if _set(c, "status") == "closed"
    ]


def tickets_assigned_to_agent(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        assignee = (change.after or {}).get("assignee_id")
        if _changed(change, "assignee_id") and str(assignee) != AGENT_ID:
            out.append({"ticket_id": change.key, "assignee_id": assignee})
    return out


def tickets_required_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    fields = ("subject", "description", "priority", "type", "requester_id")
    out = []
    for change in _written_tickets(ctx):
        if change.op != "insert":
            continue
        missing = [f for f in fields if (change.after or {}).get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


def tickets_no_incident(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "type": "incident"}
        for c in _written_tickets(ctx)
        if _set(c, "type") == "incident"
    ]


def tickets_unused_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        for field in ("organization_id", "due_at"):
            value = _set(change, field)
            if value not in (None, ""):
                out.append({"ticket_id": change.key, "field": field, "value": value})
    return out


def tickets_tags_without_hash(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        if not _changed(change, "tags"):
            continue
        bad = [t for t in _list((change.after or {}).get("tags")) if str(t).lstrip().startswith("#")]
        if bad:
            out.append({"ticket_id": change.key, "tags": bad})
    return out


def tickets_custom_field_formats(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        for field, pattern in CUSTOM_FIELD_FORMATS.items():
            value = _set(change, field)
            if value in (None, ""):
                continue
            # One identifier, or several comma-separated (an onboarding ticket's four courses).
            if not all(pattern.fullmatch(part.strip()) for part in str(value).split(",")):
                out.append({"ticket_id": change.key, "field": field, "value": value})
    return out


def tickets_approver_id_format(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        value = _set(change, "approver_id")
        if value in (None, ""):
            continue
        parts = str(value).split(",")
        well_formed = all(EMAIL.fullmatch(p) for p in parts)
        ordered = [p.lower() for p in parts] == sorted(p.lower() for p in parts)
        if not (well_formed and ordered):
            out.append({"ticket_id": change.key, "approver_id": value})
    return out


def tickets_engagement_code_validated(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written_tickets(ctx):
        code = _set(change, "engagement_code")
        if code in (None, ""):
            continue
        email = _requester_email(ctx, (change.after or {}).get("requester_id"))
        if email is None or not _engagement_valid(ctx, str(code), email):
            out.append({"ticket_id": change.key, "engagement_code": code, "requester_email": email})
    return out
