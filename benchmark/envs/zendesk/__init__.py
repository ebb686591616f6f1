"""The zendesk tools shared by all five domains, with the per-domain variant differences
(docs/benchmark.md#zendesk-variants).

A domain registers ``zendesk_tools(ITS_VARIANT)`` and passes :data:`INPUT_ALIASES` to its DomainDef.
"""

from __future__ import annotations

from functools import partial

from benchmark.envs.tools import ToolFn
from benchmark.envs.zendesk import articles, crud
from benchmark.envs.zendesk.variant import AUTO, BOOKING, CONSULTING, NEOBANK, RETAIL, ZendeskVariant

__all__ = [
    "AUTO",
    "BOOKING",
    "CONSULTING",
    "INPUT_ALIASES",
    "NEOBANK",
    "READ_ONLY",
    "RETAIL",
    "ZendeskVariant",
    "zendesk_tools",
]

INPUT_ALIASES: dict[str, tuple[str, ...]] = {
    "$filter": ("filter",),
    "$orderby": ("orderby",),
    "$skip": ("skip",),
    "$top": ("top",),
    "$select": ("select",),
}
"""get_items' reference input model has ``populate_by_name``: each ``$option`` is also accepted bare."""

READ_ONLY = frozenset(
    {"zendesk_get_item", "zendesk_get_items", "zendesk_get_tables", "zendesk_search_articles"}
)


def zendesk_tools(variant: ZendeskVariant) -> dict[str, ToolFn]:
    return {
        "zendesk_create_item": partial(crud.create_item, variant),
        "zendesk_delete_item": partial(crud.delete_item, variant),
        "zendesk_get_item": partial(crud.get_item, variant),
        "zendesk_get_items": partial(crud.get_items, variant),
        "zendesk_get_tables": partial(crud.get_tables, variant),
        "zendesk_search_articles": partial(articles.search_articles, variant),
        "zendesk_update_item": partial(crud.update_item, variant),
    }
