"""The agent-facing ``/mcp`` endpoint is dispatched before the API's middleware stack and router
(issue 18: the route was behind middleware it does not use): MCP requests never pass the API's
middleware, every other path does, and ``/mcp`` keeps its own body limit."""

from __future__ import annotations

from typing import ClassVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.app import create_app
from proxy.config import ProxyConfig
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy
from tests.support.processes import serving

LIMIT = 4096


class Seen:
    """An API middleware that notes the path of every HTTP request that passes it."""

    paths: ClassVar[list[str]] = []

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            Seen.paths.append(scope["path"])
        await self.app(scope, receive, send)


def test_mcp_requests_skip_the_api_middleware_and_keep_their_body_limit() -> None:
    config = ProxyConfig.model_validate({"http": {"max_body_bytes": LIMIT}})
    app = create_app(GuardProxy([], SessionRegistry()), config, lifespan_runs_proxy=False)
    app.add_middleware(Seen)
    Seen.paths = []
    with serving(app) as base:

        async def agent() -> list[str]:
            async with Client(streamable_http_client(f"{base}/mcp"), cache=None) as client:
                return [t.name for t in (await client.list_tools()).tools]

        tools = anyio.run(agent)
        with httpx2.Client(base_url=base) as http:
            assert http.get("/healthz").status_code == 200
            too_big = http.post(
                "/mcp", content=b"x" * (LIMIT + 1), headers={"content-type": "application/json"}
            )
    assert isinstance(tools, list)  # the agent was answered through the dispatched chain
    assert Seen.paths == ["/healthz"]
    assert too_big.status_code == 413
    assert "http.max_body_bytes" in too_big.json()["error"]["message"]
