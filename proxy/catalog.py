"""The agent-visible tool catalog: every visible tool of every upstream under the name agents call it
by (the upstream's ``prefix`` and the tool's own name), and where each name leads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import mcp.types as types

from proxy.upstream_types import UpstreamError

if TYPE_CHECKING:
    from proxy.upstreams import Upstream


@dataclass(frozen=True)
class ToolRoute:
    """Where an agent-visible tool name leads: the upstream and the tool's own name there."""

    exposed: str
    upstream: Upstream
    tool: types.Tool

    @property
    def name(self) -> str:
        return self.tool.name

    def agent_tool(self) -> types.Tool:
        """The tool as agents see it: the upstream's schema and annotations, under its exposed name."""
        if self.exposed == self.tool.name:
            return self.tool
        return self.tool.model_copy(update={"name": self.exposed})


def build_catalog(upstreams: Sequence[Upstream], reserved: Sequence[str] = ()) -> dict[str, ToolRoute]:
    """Agent-visible tool name -> route, in upstream and listing order.

    Reserved and policy-hidden tools are left out. Two visible tools with one name (or a tool named
    like the proxy's own ``reserved`` tools) are a configuration error naming both and the fix.
    """
    routes: dict[str, ToolRoute] = {}
    for upstream in upstreams:
        for name, tool in upstream.tools.items():
            if not upstream.visible(name):
                continue
            exposed = upstream.prefix + name
            clash = routes.get(exposed)
            if clash is not None:
                raise UpstreamError(
                    f"tool name {exposed!r} is served by upstreams {clash.upstream.name!r} and "
                    f"{upstream.name!r}: give one of them a prefix in the config"
                )
            if exposed in reserved:
                raise UpstreamError(
                    f"upstream {upstream.name!r} serves a tool named {exposed!r}, which is the proxy's own "
                    "tool: give the upstream a prefix or rename the proxy's tool (commit_tool.name)"
                )
            routes[exposed] = ToolRoute(exposed=exposed, upstream=upstream, tool=tool)
    return routes


__all__ = ["ToolRoute", "build_catalog"]
