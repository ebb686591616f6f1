"""sandbox_external_retail (TechHome Direct): 22 tables, 33 tools.

Tool names, schemas and descriptions come from tool_schemas.json; this package holds only behaviour.
"""

from __future__ import annotations

from benchmark.envs import zendesk
from benchmark.envs.environment import DomainDef
from benchmark.envs.retail import customers, orders, payments, services
from benchmark.envs.search import make_search_tool
from benchmark.envs.zendesk import RETAIL, zendesk_tools

_tools = {
    **zendesk_tools(RETAIL),
    **orders.TOOLS,
    **payments.TOOLS,
    **services.TOOLS,
    **customers.TOOLS,
    "search_policy": make_search_tool("sandbox_external_retail"),
}

DOMAIN = DomainDef(
    name="sandbox_external_retail",
    tools=_tools,
    read_only=(
        orders.READ_ONLY | payments.READ_ONLY | services.READ_ONLY | customers.READ_ONLY | zendesk.READ_ONLY
    ),
    aliases=zendesk.INPUT_ALIASES,
)

__all__ = ["DOMAIN"]
