"""sandbox_auto_insurance (HorizonShield): 14 tables, 33 tools.

Tool names, schemas and descriptions come from tool_schemas.json; this package holds only behaviour.
"""

from __future__ import annotations

from benchmark.envs import zendesk
from benchmark.envs.auto import billing, claims, crm, policy
from benchmark.envs.environment import DomainDef
from benchmark.envs.search import make_search_tool
from benchmark.envs.zendesk import AUTO, zendesk_tools

_tools = {
    **zendesk_tools(AUTO),
    **billing.TOOLS,
    **claims.TOOLS,
    **crm.TOOLS,
    **policy.TOOLS,
    "knowledge_base_search_policy": make_search_tool("sandbox_auto_insurance"),
}

DOMAIN = DomainDef(
    name="sandbox_auto_insurance",
    tools=_tools,
    read_only=zendesk.READ_ONLY | billing.READ_ONLY | claims.READ_ONLY | crm.READ_ONLY | policy.READ_ONLY,
    aliases=zendesk.INPUT_ALIASES,
)

__all__ = ["DOMAIN"]
