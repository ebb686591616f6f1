"""What distinguishes one domain's copy of the zendesk toolset from another's (SPEC §3.5).

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

from benchmark.envs.environment import Environment

Comparator = Callable[[Any, Any], bool]
ItemHook = Callable[[str, dict[str, Any]], dict[str, Any]]
CreatedHook = Callable[[Environment, str, dict[str, Any]], None]

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


def _unchanged(table: str, item: dict[str, Any]) -> dict[str, Any]:
    return item


@dataclass(frozen=True)
class ZendeskVariant:
    """How one domain's zendesk copy differs from the others.

    ``comparators`` maps odata-query comparator class names to operators; an unlisted class keeps the
    row. ``list_fields`` are the per-table list fields where an explicit ``null`` becomes ``[]`` on
    create, and on update too when ``update_null_lists`` is set (retail); otherwise update ignores
    every ``null``. ``prepare_item`` rewrites item data before create/update (tag normalisation,
    custom-field defaults); ``after_create`` sees each created row (violation logs).
    """

    name: str
    comparators: Mapping[str, Comparator] = field(default_factory=lambda: ODATA_COMPARATORS)
    tables: Mapping[str, str] = field(default_factory=lambda: DEFAULT_TABLES)
    articles_table: str = "zendesk_articles"
    list_fields: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"tickets": ("tags",), "organizations": ("domain_names",)})
    )
    update_null_lists: bool = False
    prepare_item: ItemHook = _unchanged
    after_create: CreatedHook | None = None


RETAIL = ZendeskVariant(name="retail", comparators=RETAIL_COMPARATORS, update_null_lists=True)
