"""``@modelcontextprotocol/server-everything`` (npm) behind the proxy: the relay's protocol coverage.

The server is a stdio upstream of one ``shadowguard serve`` over HTTP (for the module) and of a
``shadowguard serve --stdio`` per stdio test. Its surface seen directly and through the proxy must
be the same (every tool with its whole metadata, resource, resource template and prompt), its
reads, completion, progress, log messages and resource updates must reach the agent, and its
requests to the client (sampling, elicitation, roots) must round-trip to the agent's client in the
handshake era and be refused with the documented reason in the 2026-07-28 era (docs/proxy.md,
"Relay"). The official TypeScript SDK client lists and calls tools through the same proxy.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

from benchmark.procs import startup_timeout_s
from tests.support.processes import SHADOWGUARD, shadowguard_serve, shadowguard_serve_refused
from tests.support.proxy import http_proxy_config, request_meta, text, write_config

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]
PROXY_TOOLS = {"commit", "rollback"}
TASK_TOOL = "simulate-research-query"
STATIC = "demo://resource/static/document/architecture.md"
SAMPLED = "sampled by the test client"
ROOT = types.Root.model_validate({"uri": "file:///srv/project", "name": "project"})


@pytest.fixture(scope="module")
def config(module_tmp: Path, everything_server: Path) -> Path:
    upstream = {
        "name": "everything",
        "transport": "stdio",
        "command": str(everything_server),
        "args": ["stdio"],
    }
    return http_proxy_config(module_tmp / "everything.yaml", upstream)


@pytest.fixture(scope="module")
def everything_over_http(module_tmp: Path, everything_server: Path) -> Any:
    """server-everything serving streamable HTTP on a free port: its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = module_tmp / "everything-http.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(everything_server), "streamableHttp"],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PORT": str(port)},
        )
    try:
        deadline = time.monotonic() + startup_timeout_s()
        while f"listening on port {port}" not in log.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def http_upstream_proxy_url(module_tmp: Path, everything_over_http: str) -> Any:
    """The proxy in front of server-everything as a streamable-HTTP upstream."""
    config = write_config(
        module_tmp / "everything-http.yaml",
        [{"name": "everything", "transport": "http", "url": everything_over_http}],
        http={"host": "127.0.0.1", "port": 0},
        audit={"path": str(module_tmp / "audit-http.jsonl")},
        approvals={"wait_s": 0},
    )
    process = shadowguard_serve(config).ready()
    yield process.url
    assert process.stop() == 0, process.log.read_text()


@pytest.fixture(params=["stdio-upstream", "http-upstream"])
def any_upstream_proxy_url(request: pytest.FixtureRequest) -> str:
    """The HTTP proxy in front of server-everything as a stdio upstream, then as an HTTP upstream."""
    fixture = "proxy_url" if request.param == "stdio-upstream" else "http_upstream_proxy_url"
    url: str = request.getfixturevalue(fixture)
    return url


class Seen:
    """What the agent's client was sent: notifications, log messages, and the requests it answered."""

    def __init__(self) -> None:
        self.notifications: list[str] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.asked: list[str] = []

    async def message(self, message: Any) -> None:
        if isinstance(message, Exception):
            raise message
        self.notifications.append(message.method)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def sampling(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.asked.append("sampling")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=SAMPLED), model="test-model"
        )

    async def elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async def roots(self, context: Any) -> types.ListRootsResult:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[ROOT])

    def options(self) -> dict[str, Any]:
        return {
            "message_handler": self.message,
            "logging_callback": self.log,
            "sampling_callback": self.sampling,
            "elicitation_callback": self.elicitation,
            "list_roots_callback": self.roots,
        }


@asynccontextmanager
async def client(target: Any, mode: str, seen: Seen | None = None) -> AsyncIterator[Client]:
    seen = seen or Seen()
    async with Client(target, mode=mode, cache=None, read_timeout_seconds=60, **seen.options()) as connected:
        yield connected


def direct(everything_server: Path) -> StdioServerParameters:
    return StdioServerParameters(command=str(everything_server), args=["stdio"])


def stdio_proxy(config: Path) -> StdioServerParameters:
    return StdioServerParameters(command=SHADOWGUARD, args=["serve", "--config", str(config), "--stdio"])


async def listed(c: Client) -> dict[str, Any]:
    """The whole surface a client sees, as wire JSON (tools by name, without the proxy's own)."""
    tools = (await c.list_tools()).tools
    resources = (await c.list_resources()).resources
    templates = (await c.list_resource_templates()).resource_templates
    prompts = (await c.list_prompts()).prompts

    def dump(items: list[Any]) -> list[dict[str, Any]]:
        return [i.model_dump(by_alias=True, mode="json", exclude_none=True) for i in items]

    return {
        "tools": {t["name"]: t for t in dump(tools) if t["name"] not in PROXY_TOOLS},
        "resources": dump(resources),
        "templates": dump(templates),
        "prompts": dump(prompts),
    }


def _execution_back(tool: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 tool as the handshake era shows it: ``execution`` out of ``_meta`` again."""
    meta = dict(tool.get("_meta") or {})
    execution = meta.pop("shadowguard/execution", None)
    out = {k: v for k, v in tool.items() if k != "_meta"}
    if meta:
        out["_meta"] = meta
    if execution is not None:
        out["execution"] = execution
    return out


# -- the surface ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_surface_through_the_proxy_is_the_upstreams(
    everything_server: Path, any_upstream_proxy_url: str, mode: str
) -> None:
    proxy_url = any_upstream_proxy_url
    async with client(direct(everything_server), "legacy") as upstream:
        expected = await listed(upstream)
        offered = upstream.server_capabilities
    async with client(proxy_url, mode) as agent:
        seen = await listed(agent)
    if mode != "legacy":
        seen["tools"] = {name: _execution_back(tool) for name, tool in seen["tools"].items()}
    assert sorted(seen["tools"]) == sorted(expected["tools"])
    for name, tool in expected["tools"].items():
        assert seen["tools"][name] == tool, name
    assert expected["tools"][TASK_TOOL]["execution"] == {"taskSupport": "required"}
    assert seen["resources"] == expected["resources"]
    assert seen["templates"] == expected["templates"]
    assert seen["prompts"] == expected["prompts"]
    assert offered.tasks is not None, "the upstream offers tasks: docs/proxy.md lists them as refused"


async def test_capabilities_follow_the_upstream(proxy_url: str) -> None:
    async with client(proxy_url, "legacy") as agent:
        caps = agent.server_capabilities
    assert caps.resources is not None and caps.resources.subscribe and caps.resources.list_changed
    assert caps.prompts is not None and caps.prompts.list_changed
    assert caps.tools is not None and caps.tools.list_changed
    assert caps.completions is not None and caps.logging is not None
    assert caps.tasks is None


@pytest.mark.parametrize("mode", ERAS)
async def test_reads_prompts_and_completion_are_the_upstreams(
    everything_server: Path, proxy_url: str, mode: str
) -> None:
    async with client(direct(everything_server), "legacy") as upstream:
        static = await upstream.read_resource(STATIC)
        prompt = await upstream.get_prompt("args-prompt", {"city": "Paris", "state": "Texas"})
        ref = types.PromptReference(type="ref/prompt", name="completable-prompt")
        completion = await upstream.complete(ref, {"name": "department", "value": "Eng"})
    async with client(proxy_url, mode) as agent:
        assert (await agent.read_resource(STATIC)).contents == static.contents
        templated = await agent.read_resource("demo://resource/dynamic/text/7")
        relayed = await agent.get_prompt("args-prompt", {"city": "Paris", "state": "Texas"})
        assert (relayed.description, relayed.messages) == (prompt.description, prompt.messages)
        relayed_completion = await agent.complete(ref, {"name": "department", "value": "Eng"})
        assert relayed_completion.completion == completion.completion
        with pytest.raises(Exception, match="Unknown resource: nowhere://x"):
            await agent.read_resource("nowhere://x")
        with pytest.raises(Exception, match="Unknown prompt: no-such-prompt"):
            await agent.get_prompt("no-such-prompt")
    content = templated.contents[0]
    assert isinstance(content, types.TextResourceContents) and content.text.startswith("Resource 7:")


# -- notifications ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_reaches_the_agent(any_upstream_proxy_url: str, mode: str) -> None:
    proxy_url = any_upstream_proxy_url
    reported: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total))

    async with client(proxy_url, mode) as agent:
        result = await agent.call_tool(
            "trigger-long-running-operation",
            {"duration": 1, "steps": 4},
            progress_callback=on_progress,
            meta=request_meta({"shadowguard/session": f"progress-{mode}"}),
        )
    assert not result.is_error, text(result)
    assert reported == [(1.0, 4.0), (2.0, 4.0), (3.0, 4.0), (4.0, 4.0)]


async def test_log_messages_and_resource_updates_reach_a_handshake_era_agent(config: Path) -> None:
    seen = Seen()
    async with client(stdio_proxy(config), "legacy", seen) as agent:
        await agent.session.send_request(
            types.SetLevelRequest(params=types.SetLevelRequestParams(level="debug")), types.EmptyResult
        )
        await agent.session.send_request(
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=STATIC)), types.EmptyResult
        )
        for tool in ("toggle-simulated-logging", "toggle-subscriber-updates"):
            result = await agent.call_tool(tool, {})
            assert not result.is_error, text(result)
        with anyio.fail_after(20):
            while not seen.logs or "notifications/resources/updated" not in seen.notifications:
                await anyio.sleep(0.1)
        for tool in ("toggle-simulated-logging", "toggle-subscriber-updates"):
            await agent.call_tool(tool, {})
    assert all(log.logger is not None and log.logger.startswith("everything") for log in seen.logs)


async def test_a_2026_agent_gets_log_messages_it_opts_in_to(any_upstream_proxy_url: str) -> None:
    proxy_url = any_upstream_proxy_url
    seen = Seen()
    meta = request_meta({"shadowguard/session": "logs-2026", "io.modelcontextprotocol/logLevel": "debug"})
    async with client(proxy_url, "2026-07-28", seen) as agent:
        on = await agent.call_tool("toggle-simulated-logging", {}, meta=meta)
        off = await agent.call_tool("toggle-simulated-logging", {}, meta=meta)
    assert not on.is_error and not off.is_error, text(on) + text(off)
    assert seen.logs, "the log message sent while the call ran was not relayed"
    assert seen.logs[0].logger is not None and seen.logs[0].logger.startswith("everything")


async def test_a_2026_agent_listens_for_resource_updates(proxy_url: str) -> None:
    meta = request_meta({"shadowguard/session": "listen-2026"})
    async with (
        client(proxy_url, "2026-07-28") as agent,
        agent.listen(resource_subscriptions=[STATIC]) as events,
    ):
        on = await agent.call_tool("toggle-subscriber-updates", {}, meta=meta)
        assert not on.is_error, text(on)
        try:
            with anyio.fail_after(20):
                event = await events.__anext__()
        finally:
            await agent.call_tool("toggle-subscriber-updates", {}, meta=meta)
    assert isinstance(event, ResourceUpdated) and event.uri == STATIC


# -- the upstream's requests to the client ----------------------------------------------------------


CLIENT_REQUESTS = [
    ("trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 20}, SAMPLED),
    ("trigger-elicitation-request", {}, "Ada Lovelace"),
    ("get-roots-list", {}, str(ROOT.uri)),
]


@pytest.mark.parametrize(
    ("transport", "mode"),
    [
        ("http", "legacy"),
        ("http", "2026-07-28"),
        ("stdio", "legacy"),
        ("stdio", "2026-07-28"),
        ("http-upstream", "legacy"),
        ("http-upstream", "2026-07-28"),
    ],
)
async def test_sampling_elicitation_and_roots_round_trip_to_the_agent(
    config: Path, proxy_url: str, transport: str, mode: str, request: pytest.FixtureRequest
) -> None:
    """Handshake era: the upstream's requests go to the agent as requests; 2026-07-28: as input rounds.
    ``http-upstream``: the HTTP proxy in front of server-everything serving streamable HTTP."""
    seen = Seen()
    target: Any = proxy_url if transport == "http" else stdio_proxy(config)
    if transport == "http-upstream":
        target = request.getfixturevalue("http_upstream_proxy_url")
    meta = request_meta({"shadowguard/session": f"requests-{transport}"}) if mode != "legacy" else None
    async with client(target, mode, seen) as agent:
        for tool, arguments, answer in CLIENT_REQUESTS:
            result = await agent.call_tool(tool, arguments, meta=meta)
            assert not result.is_error, text(result)
            assert answer in text(result), (tool, text(result))
        assert (await agent.call_tool("echo", {"message": "after"}, meta=meta)).content
    # The upstream keeps the roots it was given (its connection is shared), so it may not ask again.
    assert {"elicitation", "sampling"} <= set(seen.asked) <= {"elicitation", "roots", "sampling"}


async def test_the_stdio_agent_answers_requests_made_outside_its_calls(config: Path) -> None:
    """The upstream asks for roots when told they changed: a stdio proxy's one agent is asked."""
    seen = Seen()
    async with client(stdio_proxy(config), "legacy", seen) as agent:
        await agent.session.send_request(
            types.SetLevelRequest(params=types.SetLevelRequestParams(level="info")), types.EmptyResult
        )
        await agent.session.send_notification(types.RootsListChangedNotification())
        with anyio.fail_after(20):
            while "roots" not in seen.asked or not any("Roots updated" in str(log.data) for log in seen.logs):
                await anyio.sleep(0.1)


async def test_an_http_agent_is_not_asked_outside_its_calls(proxy_url: str) -> None:
    """Several agents share the upstream: a request outside an agent's call goes to none of them."""
    seen = Seen()
    async with client(proxy_url, "legacy", seen) as agent:
        await agent.session.send_notification(types.RootsListChangedNotification())
        await anyio.sleep(2)
        assert "roots" not in seen.asked
        result = await agent.call_tool("echo", {"message": "still serving"})
    assert text(result) == "Echo: still serving"


async def test_an_upstream_request_for_an_undeclared_capability_is_refused(proxy_url: str) -> None:
    async with Client(proxy_url, mode="legacy", cache=None, read_timeout_seconds=60) as agent:
        result = await agent.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
    assert result.is_error
    assert "the agent's client did not declare the sampling capability" in text(result)


async def test_an_unknown_input_round_is_refused(proxy_url: str) -> None:
    no_answers: types.InputResponses = {}
    async with client(proxy_url, "2026-07-28") as agent:
        with pytest.raises(MCPError, match="Unknown or expired requestState"):
            await agent.session.call_tool(
                "echo",
                {"message": "x"},
                request_state="relay:" + "0" * 32,
                input_responses=no_answers,
                meta=request_meta({"shadowguard/session": "rounds"}),
                allow_input_required=True,
            )


@pytest.mark.parametrize("mode", ERAS)
async def test_a_task_only_tool_is_refused_and_not_sent(proxy_url: str, mode: str) -> None:
    async with client(proxy_url, mode) as agent:
        result = await agent.call_tool(
            TASK_TOOL, {"topic": "x"}, meta=request_meta({"shadowguard/session": f"task-{mode}"})
        )
    assert result.is_error
    assert text(result).startswith(f"Refused by the guard: {TASK_TOOL} did not run and nothing changed.")
    assert "does not relay tasks" in text(result)
    assert result.structured_content is not None
    assert result.structured_content["violations"][0]["rule_id"] == "task_tool"


# -- the official TypeScript SDK as the agent --------------------------------------------------------

TS_AGENT = """
import {{ Client }} from {client};
import {{ StreamableHTTPClientTransport }} from {http};
import {{ StdioClientTransport }} from {stdio};

const [kind, target, ...args] = process.argv.slice(2);
const transport = kind === "http"
  ? new StreamableHTTPClientTransport(new URL(target))
  : new StdioClientTransport({{ command: target, args, stderr: "inherit" }});
const client = new Client({{ name: "ts-agent", version: "1.0.0" }});
await client.connect(transport);
const tools = await client.listTools();
const echo = await client.callTool({{ name: "echo", arguments: {{ message: "hello from TypeScript" }} }});
const resources = await client.listResources();
const prompts = await client.listPrompts();
if (kind === "http") await transport.terminateSession();
await client.close();
console.log(JSON.stringify({{
  tools: tools.tools.map((t) => t.name),
  echo,
  resources: resources.resources.length,
  prompts: prompts.prompts.length,
}}));
"""


def ts_agent(folder: Path, sdk: Path) -> Path:
    def module(path: str) -> str:
        return json.dumps((sdk / "dist" / "esm" / path).as_uri())

    script = folder / "ts_agent.mjs"
    script.write_text(
        TS_AGENT.format(
            client=module("client/index.js"),
            http=module("client/streamableHttp.js"),
            stdio=module("client/stdio.js"),
        )
    )
    return script


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_the_typescript_sdk_lists_and_calls_tools(
    module_tmp: Path, ts_sdk: Path, config: Path, proxy_url: str, transport: str
) -> None:
    node = shutil.which("node")
    assert node is not None
    script = ts_agent(module_tmp, ts_sdk)
    target = (
        [proxy_url] if transport == "http" else [SHADOWGUARD, "serve", "--config", str(config), "--stdio"]
    )
    done = subprocess.run(
        [node, str(script), transport, *target], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"echo", "commit", "rollback", TASK_TOOL} <= set(out["tools"])
    assert not out["echo"].get("isError"), out["echo"]
    assert out["echo"]["content"][0]["text"] == "Echo: hello from TypeScript"
    assert out["echo"]["_meta"]["shadowguard/outcome"]["verdict"] == "allowed"
    assert out["resources"] == 7 and out["prompts"] == 4


def test_two_upstreams_serving_one_resource_uri_stop_the_proxy(
    module_tmp: Path, everything_server: Path
) -> None:
    upstreams = [
        {
            "name": name,
            "transport": "stdio",
            "command": str(everything_server),
            "args": ["stdio"],
            "prefix": prefix,
        }
        for name, prefix in (("one", "one_"), ("two", "two_"))
    ]
    config = write_config(module_tmp / "clash.yaml", upstreams, http={"host": "127.0.0.1", "port": 0})
    refusal = shadowguard_serve_refused(config)
    assert "is served by upstreams 'one' and 'two'" in refusal
    assert "demo://resource/" in refusal
