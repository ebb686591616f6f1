"""The relay with an SDK 2.x upstream that needs the client's input (tests/fixtures/asking_server.py).

The proxy's upstream connection speaks the 2026-07-28 era to it, so the upstream asks with
``InputRequiredResult`` rounds, which the proxy's upstream client drives and relays to the agent:
as an ``elicitation/create`` request to a handshake-era agent, as an input round of its own to a
2026-07-28 agent. An agent that does not declare elicitation gets the refusal, and the upstream's
progress reaches an agent that asked for it. One ``shadowguard serve --stdio`` per agent.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ToolsListChanged

from tests.support.processes import SHADOWGUARD
from tests.support.proxy import write_config

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]
ASKING_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "asking_server.py"


@pytest.fixture(scope="module")
def proxy(module_tmp: Path) -> StdioServerParameters:
    upstream = {
        "name": "asking",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(ASKING_SERVER)],
    }
    config = write_config(
        module_tmp / "asking.yaml", [upstream], audit={"path": str(module_tmp / "audit.jsonl")}
    )
    return StdioServerParameters(command=SHADOWGUARD, args=["serve", "--config", str(config), "--stdio"])


def text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


@pytest.mark.parametrize("mode", ERAS)
async def test_an_upstreams_input_round_reaches_the_agent(proxy: StdioServerParameters, mode: str) -> None:
    asked: list[str] = []

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    reported: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    async with Client(proxy, mode=mode, cache=None, elicitation_callback=elicitation) as agent:
        greeted = await agent.call_tool("greet", {})
        counted = await agent.call_tool("progress", {}, progress_callback=on_progress)
    assert not greeted.is_error, text(greeted)
    assert text(greeted) == "Hello, Grace!"
    assert asked == ["Your name?"]
    assert not counted.is_error and reported == [1, 2, 3]


@pytest.mark.parametrize("mode", ERAS)
async def test_an_agent_without_elicitation_is_not_asked(proxy: StdioServerParameters, mode: str) -> None:
    async with Client(proxy, mode=mode, cache=None) as agent:
        result = await agent.call_tool("greet", {})
    assert result.is_error
    assert "the agent's client did not declare the elicitation capability" in text(result)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_changed_tool_list_reaches_the_agent(proxy: StdioServerParameters, mode: str) -> None:
    """The upstream (2026-07-28 to the proxy) says so on a listen stream; the proxy reloads its tools
    and tells the agent: a notification in the handshake era, a listen event in the 2026-07-28 era."""
    notified: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            raise message
        notified.append(message.method)

    async with Client(proxy, mode=mode, cache=None, message_handler=on_message) as agent:
        assert "extra" not in {t.name for t in (await agent.list_tools()).tools}
        if mode == "legacy":
            await agent.call_tool("grow", {})
            with anyio.fail_after(20):
                while "notifications/tools/list_changed" not in notified:
                    await anyio.sleep(0.05)
        else:
            async with agent.listen(tools_list_changed=True) as events:
                await agent.call_tool("grow", {})
                with anyio.fail_after(20):
                    assert isinstance(await events.__anext__(), ToolsListChanged)
        assert "extra" in {t.name for t in (await agent.list_tools()).tools}
        extra = await agent.call_tool("extra", {})
        assert isinstance(extra.content[0], types.TextContent) and extra.content[0].text == "extra ran"


@pytest.mark.parametrize("mode", ERAS)
async def test_tool_metadata_is_relayed_whole(proxy: StdioServerParameters, mode: str) -> None:
    direct = StdioServerParameters(command=sys.executable, args=[str(ASKING_SERVER)])
    async with Client(direct, mode=mode, cache=None) as upstream:
        expected = {t.name: t for t in (await upstream.list_tools()).tools}
    async with Client(proxy, mode=mode, cache=None) as agent:
        listed = {t.name: t for t in (await agent.list_tools()).tools}
        result = await agent.call_tool("rich", {"word": "whole"})
    assert listed["rich"] == expected["rich"]
    assert listed["rich"].icons and listed["rich"].meta == {"example.com/owner": "tests"}
    assert listed["rich"].output_schema is not None and listed["rich"].title
    assert result.structured_content == {"word": "whole"}
