"""external_booking_v1 (StayBridge travel): 17 tables, 38 tools.

Tool names, schemas and descriptions come from tool_schemas.json; this package holds only behaviour.
"""

from __future__ import annotations

from benchmark.envs import zendesk
from benchmark.envs.booking import bookings, corporate, crm, hotels, lookup, payments
from benchmark.envs.environment import DomainDef
from benchmark.envs.search import make_search_tool
from benchmark.envs.zendesk import BOOKING, zendesk_tools

_tools = {
    **zendesk_tools(BOOKING),
    **bookings.TOOLS,
    **corporate.TOOLS,
    **crm.TOOLS,
    **hotels.TOOLS,
    **lookup.TOOLS,
    **payments.TOOLS,
    "knowledge_base_search_policy": make_search_tool("external_booking_v1"),
}

DOMAIN = DomainDef(
    name="external_booking_v1",
    tools=_tools,
    read_only=zendesk.READ_ONLY
    | bookings.READ_ONLY
    | corporate.READ_ONLY
    | crm.READ_ONLY
    | hotels.READ_ONLY
    | lookup.READ_ONLY
    | payments.READ_ONLY,
    aliases=zendesk.INPUT_ALIASES,
)

__all__ = ["DOMAIN"]
