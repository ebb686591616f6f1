"""sandbox_consulting (Meridian Strategy Group internal support): 30 tables, 27 tools.

Tool names, schemas and descriptions come from tool_schemas.json; this package holds only behaviour.
"""

from __future__ import annotations

from benchmark.envs import zendesk
from benchmark.envs.consulting import client_access, directory, services
from benchmark.envs.environment import DomainDef
from benchmark.envs.search import make_search_tool
from benchmark.envs.zendesk import CONSULTING, zendesk_tools

_tools = {
    **zendesk_tools(CONSULTING),
    **client_access.TOOLS,
    **directory.TOOLS,
    **services.TOOLS,
    "knowledge_base_search_policy": make_search_tool("sandbox_consulting"),
}

DOMAIN = DomainDef(
    name="sandbox_consulting",
    tools=_tools,
    read_only=zendesk.READ_ONLY | client_access.READ_ONLY | directory.READ_ONLY | services.READ_ONLY,
    aliases=zendesk.INPUT_ALIASES,
)

__all__ = ["DOMAIN"]
