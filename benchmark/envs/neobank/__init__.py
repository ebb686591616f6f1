"""sandbox_neobank_support_v1 (Velocity Digital Bank internal IT): 20 tables, 32 tools.

Tool names, schemas and descriptions come from tool_schemas.json; this package holds only behaviour.
"""

from __future__ import annotations

from benchmark.envs import zendesk
from benchmark.envs.environment import DomainDef
from benchmark.envs.neobank import approvals, assets, identity
from benchmark.envs.search import make_search_tool
from benchmark.envs.zendesk import NEOBANK, zendesk_tools

_tools = {
    **zendesk_tools(NEOBANK),
    **approvals.TOOLS,
    **assets.TOOLS,
    **identity.TOOLS,
    "knowledge_base_search_policy": make_search_tool("sandbox_neobank_support_v1"),
}

DOMAIN = DomainDef(
    name="sandbox_neobank_support_v1",
    tools=_tools,
    read_only=zendesk.READ_ONLY | approvals.READ_ONLY | assets.READ_ONLY | identity.READ_ONLY,
    aliases=zendesk.INPUT_ALIASES,
)

__all__ = ["DOMAIN"]
