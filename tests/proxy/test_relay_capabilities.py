"""What the proxy tells a 2026-07-28 HTTP upstream about the agent's client: its capabilities, not the
proxy's own (proxy/lean_upstream.py, "The envelope's client capabilities are the agent's").

The upstream is the asking fixture over streamable HTTP (tests/fixtures/asking_server.py): in the
2026-07-28 era it asks a client that declared elicitation for a name, with an input round, and
greets any other client as "stranger" without asking, as a server should. Through the proxy it must
do for each agent what it does for that agent's client directly, in both of the agent's eras.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import Client

from tests.support.processes import Process, shadowguard_serve
from tests.support.proxy import http_proxy_config, text

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]
ASKING_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "asking_server.py"
INPUT_CAPABILITIES = ("elicitation", "sampling", "roots")


@pytest.fixture(scope="module")
def upstream(module_tmp: Path) -> Iterator[str]:
    process = Process(
        [sys.executable, str(ASKING_SERVER), "--port", "0"],
        module_tmp / "asking-http.log",
        announce="asking: listening on",
    )
    try:
        yield process.ready().url
    finally:
        assert process.stop() == 0 or process.proc.returncode == -15


@pytest.fixture(scope="module")
def proxy(module_tmp: Path, upstream: str) -> Iterator[Process]:
    config = http_proxy_config(
        module_tmp / "asking-proxy.yaml", {"name": "asking", "transport": "http", "url": upstream}
    )
    process = shadowguard_serve(config)
    try:
        yield process.ready()
    finally:
        process.stop()


async def _name(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Grace"})


@asynccontextmanager
async def client(url: str, mode: str, *, elicits: bool) -> AsyncIterator[Client]:
    async with Client(
        url, mode=mode, cache=None, read_timeout_seconds=60, elicitation_callback=_name if elicits else None
    ) as agent:
        yield agent


async def lean_upstream_calls(proxy: Process) -> float:
    async with httpx2.AsyncClient(base_url=proxy.base, timeout=30) as http:
        metrics = (await http.get("/metrics")).text
    found = re.search(r'^shadowguard_relay_calls_total\{path="lean_upstream"\} ([\d.e+]+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def told(result: types.CallToolResult) -> dict[str, Any]:
    """The input capabilities the upstream was told of (the ``capabilities`` tool's answer)."""
    assert not result.is_error, text(result)
    declared = json.loads(text(result)) or {}
    return {key: value for key, value in declared.items() if key in INPUT_CAPABILITIES}


@pytest.mark.parametrize("elicits", [False, True], ids=["no-elicitation", "elicitation"])
@pytest.mark.parametrize("mode", ERAS)
async def test_the_upstream_is_told_what_the_agent_declared(
    proxy: Process, upstream: str, mode: str, elicits: bool
) -> None:
    before = await lean_upstream_calls(proxy)
    async with client(upstream, "2026-07-28", elicits=elicits) as direct:
        directly = told(await direct.call_tool("capabilities", {}))
    async with client(proxy.url, mode, elicits=elicits) as agent:
        relayed = told(await agent.call_tool("capabilities", {}))
    assert relayed == directly
    assert ("elicitation" in relayed) is elicits
    assert "sampling" not in relayed and "roots" not in relayed
    assert await lean_upstream_calls(proxy) > before, "the call went by the SDK client, not the lean send"


@pytest.mark.parametrize("mode", ERAS)
async def test_an_agent_without_elicitation_gets_what_the_upstream_does_for_such_a_client(
    proxy: Process, upstream: str, mode: str
) -> None:
    async with client(upstream, "2026-07-28", elicits=False) as direct:
        directly = await direct.call_tool("greet", {})
    async with client(proxy.url, mode, elicits=False) as agent:
        relayed = await agent.call_tool("greet", {})
    assert not directly.is_error and text(directly) == "Hello, stranger!"
    assert not relayed.is_error, text(relayed)
    assert text(relayed) == "Hello, stranger!"


@pytest.mark.parametrize("mode", ERAS)
async def test_an_agent_with_elicitation_is_asked_through_the_proxy(proxy: Process, mode: str) -> None:
    async with client(proxy.url, mode, elicits=True) as agent:
        greeted = await agent.call_tool("greet", {})
    assert not greeted.is_error, text(greeted)
    assert text(greeted) == "Hello, Grace!"
