"""What distinguishes one domain's copy of the zendesk toolset from another's
(docs/benchmark.md#zendesk-variants).

The five reference domains ship near-identical zendesk packages. The shared behaviour lives in
:mod:`benchmark.envs.zendesk.crud`, :mod:`~benchmark.envs.zendesk.odata` and
:mod:`~benchmark.envs.zendesk.articles`; a domain differs only by the values of a :class:`ZendeskVariant`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from benchmark.envs.records import TableRef
from benchmark.envs.zendesk.rows import Article

Comparator = Callable[[Any, Any], bool]
ItemHook = Callable[[str, dict[str, Any]], dict[str, Any]]
TagsHook = Callable[[list[str]], list[str]]

SUPPORTED_TABLES = ("tickets", "users", "organizations", "comments", "ticket_comments")
"""The ``table`` values the CRUD tools accept; every other enum value is refused as unsupported."""

DEFAULT_TABLES: Mapping[str, str] = MappingProxyType({name: f"zendesk_{name}" for name in SUPPORTED_TABLES})

RETAIL_COMPARATORS: Mapping[str, Comparator] = MappingProxyType(
    {
        # The retail copy names `ne`/`ge`/`le` by class names odata-query never produces (its classes
        # are NotEq/GtE/LtE), so those comparisons fall through and keep every row.
        "Eq": operator.eq,
        "Ne": operator.ne,
        "Gt": operator.gt,
        "Ge": operator.ge,
        "Lt": operator.lt,
        "Le": operator.le,
    }
)

ODATA_COMPARATORS: Mapping[str, Comparator] = MappingProxyType(
    {
        "Eq": operator.eq,
        "NotEq": operator.ne,
        "Gt": operator.gt,
        "GtE": operator.ge,
        "Lt": operator.lt,
        "LtE": operator.le,
    }
)
"""The comparator classes odata-query really produces (used by the four non-retail copies)."""


ARTICLES: TableRef[Article] = TableRef("zendesk_articles")


def _unchanged(table: str, item: dict[str, Any]) -> dict[str, Any]:
    return item


@dataclass(frozen=True)
class ZendeskVariant:
    """How one domain's zendesk copy differs from the others.

    ``comparators`` maps odata-query comparator class names to operators; an unlisted class keeps the
    row. ``list_fields`` are the per-table list fields where an explicit ``null`` becomes ``[]`` on
    create, and on update too when ``update_null_lists`` is set (retail); otherwise update ignores
    every ``null``. ``prepare_item`` rewrites the sent item data before create/update (input quirks
    such as comma-separated lists). ``ticket_tags`` rewrites the stored ticket tags on every ticket
    create and on updates that send tags; with ``echo_sent_tags`` the response still shows the tags as
    sent. ``ticket_create_defaults`` fill ticket fields a create leaves missing or null. With
    ``violations_table`` a ticket created with a status other than ``open`` is logged there.
    """

    name: str
    comparators: Mapping[str, Comparator] = field(default_factory=lambda: ODATA_COMPARATORS)
    tables: Mapping[str, str] = field(default_factory=lambda: DEFAULT_TABLES)
    articles_table: TableRef[Article] = ARTICLES
    list_fields: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"tickets": ("tags",), "organizations": ("domain_names",)})
    )
    update_null_lists: bool = False
    prepare_item: ItemHook = _unchanged
    ticket_tags: TagsHook | None = None
    echo_sent_tags: bool = False
    ticket_create_defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    violations_table: str | None = None


BOOKING_IGNORED_TAGS = frozenset({"vip-customer", "repeat-issue", "hotel-partner-escalation"})
"""Tags the booking copy never stores (compared case-insensitively)."""


def booking_ticket_tags(tags: list[str]) -> list[str]:
    """Drop the ignored tags and sort case-insensitively (ties by exact text); duplicates stay."""
    kept = [t for t in tags if t.lower() not in BOOKING_IGNORED_TAGS]
    return sorted(kept, key=lambda t: (t.lower(), t))


VIOLATIONS_TABLE = "zendesk_ticket_status_violations"

RETAIL = ZendeskVariant(name="retail", comparators=RETAIL_COMPARATORS, update_null_lists=True)
BOOKING = ZendeskVariant(
    name="booking",
    ticket_tags=booking_ticket_tags,
    echo_sent_tags=True,
    ticket_create_defaults=MappingProxyType({"refund_amount": 0.0}),
)
AUTO = ZendeskVariant(name="auto", violations_table=VIOLATIONS_TABLE)


NEOBANK_SPLIT_FIELDS = ("tags", "domain_names")
"""The neobank inputs take these list fields as one comma-separated string."""


def neobank_item(table: str, item: dict[str, Any]) -> dict[str, Any]:
    """Split the comma-separated list fields into stripped parts; an empty string is no parts."""
    for name in NEOBANK_SPLIT_FIELDS:
        value = item.get(name)
        if isinstance(value, str):
            item[name] = [part.strip() for part in value.split(",")] if value else []
    return item


def neobank_ticket_tags(tags: list[str]) -> list[str]:
    """Stored ticket tags are stripped, lower-cased and sorted; duplicates stay."""
    return sorted(t.strip().lower() for t in tags)


NEOBANK = ZendeskVariant(
    name="neobank",
    prepare_item=neobank_item,
    ticket_tags=neobank_ticket_tags,
    violations_table=VIOLATIONS_TABLE,
)
CONSULTING = ZendeskVariant(name="consulting", violations_table=VIOLATIONS_TABLE)
"""Its User row also turns an int ``organization_id`` into text, but no tool input can carry one: the
inputs type it as a string, and an item failing ``UserCreateInput`` validates as another union member
that drops the field. Only data rows could, and no default or patch row has one."""
