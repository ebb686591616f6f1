"""The zendesk tools shared by all five domains, with the per-domain variant differences (SPEC §3.5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.tools import ToolFn


@dataclass(frozen=True)
class ZendeskVariant:
    """How one domain's zendesk copy differs from the others."""

    name: str


RETAIL = ZendeskVariant(name="retail")

_NAMES = [
    "zendesk_create_item", "zendesk_delete_item", "zendesk_get_item", "zendesk_get_items",
    "zendesk_get_tables", "zendesk_search_articles", "zendesk_update_item",
]


def zendesk_tools(variant: ZendeskVariant) -> dict[str, ToolFn]:
    def stub(env: Environment, args: BaseModel) -> dict[str, Any]:
        raise ToolError("zendesk: not implemented yet")

    return {n: stub for n in _NAMES}
