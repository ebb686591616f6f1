"""Zendesk tickets: what a call wrote (after_call)."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    AGENT_ID,
    COMMENT_TABLES,
    CUSTOM_FIELD_VALUES,
    DATE_FORMAT,
    SYSTEM_STATUSES,
    TICKETS,
    _changed,
    _date,
    _rows,
)


# -- tickets (after_call) -------------------------------------------------------------------------
def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def no_unused_ticket_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        used = [
            field
            for field in ("organization_id", "due_at", "tags")
            if after.get(field) not in (None, "", []) and _changed(change, field)
        ]
        if used:
            out.append({"ticket_id": change.key, "fields": used})
    return out


def every_interaction_has_a_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    if any(c.after is not None for c in _rows(ctx, TICKETS)):
        return []
    return [{"tickets_written": 0, "tables_written": sorted({c.table for c in ctx.changes})}]


def tickets_assigned_to_agent(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "assignee_id": c.after.get("assignee_id")}
        for c in _rows(ctx, TICKETS)
        if c.after is not None and _changed(c, "assignee_id") and str(c.after.get("assignee_id")) != AGENT_ID
    ]


def tickets_created_open(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": c.after.get("status"), "expected": "open"}
        for c in _rows(ctx, TICKETS)
        if c.after is not None and c.op == "insert" and c.after.get("status") != "open"
    ]


def no_system_statuses(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": c.after.get("status")}
        for c in _rows(ctx, TICKETS)
        if c.after is not None and _changed(c, "status") and c.after.get("status") in SYSTEM_STATUSES
    ]


def custom_field_values(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        for field, allowed in CUSTOM_FIELD_VALUES.items():
            value = after.get(field)
            if value is not None and _changed(change, field) and value not in allowed:
                out.append({"ticket_id": change.key, "field": field, "value": value})
        date = after.get("effective_date_of_change")
        if (
            date is not None
            and _changed(change, "effective_date_of_change")
            and (not DATE_FORMAT.match(str(date)) or _date(date) is None)
        ):
            out.append({"ticket_id": change.key, "field": "effective_date_of_change", "value": date})
    return out


def requester_is_user(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        requester = (change.after or {}).get("requester_id")
        if requester is None or not _changed(change, "requester_id"):
            continue
        if not ctx.query("SELECT id FROM zendesk_users WHERE id = :id", {"id": str(requester)}):
            out.append({"ticket_id": change.key, "requester_id": requester})
    return out
