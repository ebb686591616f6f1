"""Zendesk tickets: the fields a call writes (after_call)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from guard.checks import CheckContext

from .lookups import (
    AGENT_ID,
    ALLOWED_TAGS,
    ASSET_TAG,
    COMMENT_TABLES,
    CREATION_OWNER,
    ORGANIZATION_ID,
    SYSTEM_STATUSES,
    TICKETS,
    _changed,
    _written,
)


# -- Zendesk tickets: fields a call writes (after_call) -----------------------------------------------
def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def ticket_system_statuses(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": c.after.get("status")}
        for c in _written(ctx, TICKETS)
        if c.after is not None and _changed(c, "status") and c.after.get("status") in SYSTEM_STATUSES
    ]


CREATION_FIELDS = ("type", "priority", "subject", "description", "requester_id")


def ticket_creation_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        if change.op != "insert":
            continue
        missing = [f for f in CREATION_FIELDS if not (change.after or {}).get(f)]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


def ticket_assignee(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        assert change.after is not None
        assignee = change.after.get("assignee_id")
        if _changed(change, "assignee_id") and str(assignee) != AGENT_ID:
            out.append({"ticket_id": change.key, "assignee_id": assignee, "expected": AGENT_ID})
    return out


def ticket_organization(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        assert change.after is not None
        organization = change.after.get("organization_id")
        if _changed(change, "organization_id") and str(organization) != ORGANIZATION_ID:
            out.append({"ticket_id": change.key, "organization_id": organization, "expected": "1"})
    return out


def ticket_owner_on_create(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "owner": c.after.get("owner"), "expected": CREATION_OWNER}
        for c in _written(ctx, TICKETS)
        if c.op == "insert" and c.after is not None and c.after.get("owner") != CREATION_OWNER
    ]


def ticket_no_due_at(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "due_at": c.after.get("due_at")}
        for c in _written(ctx, TICKETS)
        if c.after is not None and c.after.get("due_at") is not None and _changed(c, "due_at")
    ]


def ticket_allowed_tags(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        assert change.after is not None
        if not _changed(change, "tags"):
            continue
        unknown = sorted({str(t) for t in change.after.get("tags") or []} - ALLOWED_TAGS)
        if unknown:
            out.append({"ticket_id": change.key, "tags": change.after.get("tags"), "not_allowed": unknown})
    return out


def ticket_type_not_task(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "type": "task"}
        for c in _written(ctx, TICKETS)
        if c.after is not None and c.after.get("type") == "task" and _changed(c, "type")
    ]


def ticket_solved_with_resolution(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": "solved", "resolution_category": None}
        for c in _written(ctx, TICKETS)
        if c.after is not None
        and c.after.get("status") == "solved"
        and _changed(c, "status")
        and not c.after.get("resolution_category")
    ]


def ticket_asset_id_format(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        assert change.after is not None
        asset = change.after.get("asset_id")
        if asset is not None and _changed(change, "asset_id") and not ASSET_TAG.fullmatch(str(asset)):
            out.append({"ticket_id": change.key, "asset_id": asset, "format": "VDB-HW-#####"})
    return out


def ticket_id_lists_without_spaces(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        assert change.after is not None
        for field in ("approver_id", "approval_request_ids"):
            value = change.after.get(field)
            if value is not None and _changed(change, field) and re.search(r"\s", str(value)):
                out.append({"ticket_id": change.key, field: value})
    return out


def ticket_approval_required_kept(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "approval_required": ["yes", "no"]}
        for c in _written(ctx, TICKETS)
        if c.op == "update"
        and (c.before or {}).get("approval_required") == "yes"
        and (c.after or {}).get("approval_required") == "no"
    ]


def _is_iso_datetime(text: str) -> bool:
    if "T" not in text:
        return False
    try:
        dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def ticket_access_expiry_format(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _written(ctx, TICKETS):
        assert change.after is not None
        expiry = change.after.get("access_expiry_date")
        if (
            expiry is not None
            and _changed(change, "access_expiry_date")
            and not _is_iso_datetime(str(expiry))
        ):
            out.append({"ticket_id": change.key, "access_expiry_date": expiry})
    return out
