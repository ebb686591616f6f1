"""The zendesk table tools: get_tables, get_item, get_items, create_item, update_item, delete_item.

Each takes the domain's :class:`ZendeskVariant` first (bound by ``zendesk_tools``). Items are returned
as the full row (nulls kept). Ids are count-based without a collision check, so a create after a
delete can hit "Object with ID ... already exists" (docs/benchmark.md#new-ids).
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import ValidationError

from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.records import Record
from benchmark.envs.zendesk import odata
from benchmark.envs.zendesk.inputs import (
    ZendeskCreateItemInput,
    ZendeskDeleteItemInput,
    ZendeskGetItemInput,
    ZendeskGetItemsInput,
    ZendeskGetTablesInput,
    ZendeskUpdateItemInput,
)
from benchmark.envs.zendesk.variant import SUPPORTED_TABLES, ZendeskVariant

CREATED_AT = "2025-10-01T13:00:05Z"
TICKET_UPDATED_AT = "2025-10-01T13:00:10Z"
UPDATED_AT = "2025-10-01T13:00:05Z"
TICKET_COMMENT_BASE_ID = 23118465221916
TICKETS = "tickets"
TICKET_COMMENTS = "ticket_comments"

TABLE_LIST = (
    "activities",
    "articles",
    "groups",
    "group_memberships",
    "organizations",
    "requests",
    "satisfaction_ratings",
    "sessions",
    "tags",
    "targets",
    "tickets",
    "ticket_audits",
    "ticket_comments",
    "ticket_fields",
    "ticket_metrics",
    "triggers",
    "users",
    "views",
)
"""What get_tables lists: the ``table`` enum without the legacy ``comments``."""


def _member(value: enum.Enum) -> str:
    """How the reference's f-strings print a str-Enum member on Python 3.11: ``TableName.TICKETS``."""
    return f"{type(value).__name__}.{value.name}"


def _table(variant: ZendeskVariant, env: Environment, table: enum.Enum) -> Table[Record]:
    if table.value not in SUPPORTED_TABLES:
        raise ToolError(
            f"Unsupported table: '{table.value}'. "
            "Only tickets, users, organizations, comments, and ticket_comments are supported."
        )
    return env.table(variant.tables[table.value])


def _validated(table: Table[Record], data: dict[str, Any], action: str) -> Record:
    try:
        return table.record(data)
    except ValidationError as exc:
        raise ToolError(f"Failed to {action} item: {exc}") from exc


def get_tables(variant: ZendeskVariant, env: Environment, args: ZendeskGetTablesInput) -> dict[str, Any]:
    return {"value": [{"Name": n, "DisplayName": n.replace("_", " ").title()} for n in TABLE_LIST]}


def get_item(variant: ZendeskVariant, env: Environment, args: ZendeskGetItemInput) -> dict[str, Any]:
    table = _table(variant, env, args.table)
    record = table.get(args.id)
    if record is None:
        raise ToolError(f"Item with ID '{args.id}' not found in table '{_member(args.table)}'")
    return {"item": record.model_dump(mode="json")}


def get_items(variant: ZendeskVariant, env: Environment, args: ZendeskGetItemsInput) -> dict[str, Any]:
    table = _table(variant, env, args.table)
    rows = table.all()
    if args.p_filter:
        rows = odata.apply_filter(rows, args.p_filter, variant.comparators)
    if args.p_orderby:
        rows = odata.apply_orderby(rows, args.p_orderby)
    rows = odata.page(rows, args.p_skip, args.p_top)
    return {"items": odata.select([r.model_dump(mode="json") for r in rows], args.p_select)}


def create_item(variant: ZendeskVariant, env: Environment, args: ZendeskCreateItemInput) -> dict[str, Any]:
    table = _table(variant, env, args.table)
    name = args.table.value
    count = table.count()
    new_id: int | str = TICKET_COMMENT_BASE_ID + count if name == TICKET_COMMENTS else str(count + 1)
    # exclude_unset: fields the caller sent as null stay null (and fail where the row requires them).
    data = variant.prepare_item(name, args.item.model_dump(mode="json", exclude_unset=True))
    data["id"] = new_id
    sent_tags = data.get("tags")
    if name == TICKETS:
        for key, default in variant.ticket_create_defaults.items():
            if data.get(key) is None:
                data[key] = default
        if variant.ticket_tags is not None:
            data["tags"] = variant.ticket_tags(data.get("tags") or [])
    for list_field in variant.list_fields.get(name, ()):
        if list_field in data and data[list_field] is None:
            data[list_field] = []
    data.setdefault("created_at", CREATED_AT)
    if name == TICKET_COMMENTS:
        data.setdefault("key", str(new_id))
        if "html_body" not in data and "body" in data:
            data["html_body"] = f'<div class="zd-comment" dir="auto"><p dir="auto">{data["body"]}</p></div>'
    else:
        data.setdefault("updated_at", CREATED_AT)
    record = _validated(table, data, "create")
    table.create(record)
    created = record.model_dump(mode="json")
    if name == TICKETS and variant.violations_table is not None and created["status"] != "open":
        _log_status_violation(env.table(variant.violations_table), created)
    return {"item": _shown(variant, name, created, sent_tags)}


def _log_status_violation(violations: Table[Record], ticket: dict[str, Any]) -> None:
    """The auto/neobank/consulting copies record every ticket created in a status other than open."""
    row = {
        "id": f"VIOLATION-{violations.count() + 1}",
        "ticket_id": ticket["id"],
        "created_status": ticket["status"],
        "created_at": CREATED_AT,
    }
    violations.create(violations.record(row))


def _shown(variant: ZendeskVariant, name: str, item: dict[str, Any], sent_tags: Any) -> dict[str, Any]:
    """The response item: the stored row, but with the tags as sent where the variant echoes them."""
    if name == TICKETS and variant.echo_sent_tags and sent_tags is not None:
        item["tags"] = sent_tags
    return item


def update_item(variant: ZendeskVariant, env: Environment, args: ZendeskUpdateItemInput) -> dict[str, Any]:
    """Partial update: nulls keep the stored value (retail: a null list field becomes ``[]``).

    Sent ticket tags pass through the variant's ``ticket_tags`` before they are stored.

    ``item`` is a smart union of the per-table update inputs, so a dict that fits no ticket input
    (e.g. an invalid status) may validate as another table's input and update nothing but updated_at.
    """
    table = _table(variant, env, args.table)
    name = args.table.value
    if name == TICKET_COMMENTS:
        raise ToolError("The value is not updatable. Ticket comments cannot be modified.")
    existing = table.get(args.id)
    if existing is None:
        raise ToolError(f"Item with ID '{args.id}' not found in table '{name}'")
    clear_lists = variant.list_fields.get(name, ()) if variant.update_null_lists else ()
    changes: dict[str, Any] = {}
    sent = variant.prepare_item(name, args.item.model_dump(mode="json", exclude_unset=True))
    for key, value in sent.items():
        if value is not None:
            changes[key] = value
        elif key in clear_lists:
            changes[key] = []
    sent_tags = sent.get("tags")
    if name == TICKETS and variant.ticket_tags is not None and sent_tags is not None:
        changes["tags"] = variant.ticket_tags(sent_tags)
    data = {**existing.model_dump(mode="json"), **changes}
    data["updated_at"] = TICKET_UPDATED_AT if name == TICKETS else UPDATED_AT
    record = _validated(table, data, "update")
    table.save(record, key=args.id)
    return {"item": _shown(variant, name, record.model_dump(mode="json"), sent_tags)}


def delete_item(variant: ZendeskVariant, env: Environment, args: ZendeskDeleteItemInput) -> dict[str, Any]:
    table = _table(variant, env, args.table)
    if args.table.value == TICKET_COMMENTS:
        raise ToolError("The value is not updatable. Ticket comments cannot be deleted.")
    if not table.delete(args.id):
        raise ToolError(f"Item with ID '{args.id}' not found in table '{_member(args.table)}'")
    return {"success": True}
