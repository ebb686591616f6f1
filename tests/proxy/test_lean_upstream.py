"""The lean upstream send (proxy/lean_upstream.py) maps what an upstream answers over real HTTP to
the errors the SDK client gives: a JSON-RPC error, 404, 5xx, 202, a wrong content type, an SSE
answer, a connection dropped under the request, a timeout. Each on both of its senders: its own
keep-alive connections (proxy/lean_http.py) and the ``httpx2`` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import MCPError
from mcp_types import methods as mcp_methods
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy import lean_upstream
from proxy.lean_upstream import LeanUpstream
from tests.support.processes import serving
from tests.support.proxy import ENVELOPE, MODERN

pytestmark = pytest.mark.anyio

SEEN: list[dict[str, Any]] = []


async def mcp(request: Request) -> Response:
    body = await request.json()
    SEEN.append({"headers": dict(request.headers), "body": body})
    name, rid = body["params"]["name"], body["id"]
    ok = {"content": [{"type": "text", "text": name}], "resultType": "complete"}
    if name == "ok":
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": ok})
    if name == "sse":
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}
        answer = {"jsonrpc": "2.0", "id": rid, "result": ok}
        text = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in (note, answer))
        return Response(text, media_type="text/event-stream")
    if name == "rpc_error":
        error = {"code": -32602, "message": "bad arguments"}
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": error}, status_code=400)
    if name == "not_found":
        return Response("no", status_code=404)
    if name == "crash":
        return Response("boom", status_code=500)
    if name == "accepted":
        return Response(status_code=202)
    if name == "html":
        return Response("<p>hi</p>", media_type="text/html")
    raise AssertionError(name)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])) as base:
        yield f"{base}/mcp"


@pytest.fixture(params=["plain", "httpx"])
def sender(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def call(url: str, name: str, sender: str) -> types.CallToolResult | types.InputRequiredResult:
    async with httpx2.AsyncClient() as http:
        lean = LeanUpstream("up", url, http, {})
        if sender == "httpx":
            lean.plain = None
        lean.tap.envelope = {k: v for k, v in ENVELOPE.items()}
        try:
            return await lean.call(name, {"a": 1}, {"acme/trace": "t"}, timeout=30)
        finally:
            await lean.aclose()


async def test_a_result_and_the_request_the_sdk_client_would_send(url: str, sender: str) -> None:
    result = await call(url, "ok", sender)
    assert isinstance(result, types.CallToolResult) and result.content[0].text == "ok"  # type: ignore[union-attr]
    seen = SEEN[-1]
    assert seen["body"]["params"] == {
        "name": "ok",
        "arguments": {"a": 1},
        "_meta": {"acme/trace": "t", **ENVELOPE},
    }
    headers = seen["headers"]
    assert (headers["mcp-method"], headers["mcp-name"], headers["mcp-protocol-version"]) == (
        "tools/call",
        "ok",
        ENVELOPE["io.modelcontextprotocol/protocolVersion"],
    )
    assert headers["accept"] == "application/json, text/event-stream"


async def test_an_sse_answer(url: str, sender: str) -> None:
    result = await call(url, "sse", sender)
    assert isinstance(result, types.CallToolResult) and not result.is_error


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("rpc_error", -32602),
        ("not_found", types.METHOD_NOT_FOUND),
        ("crash", types.INTERNAL_ERROR),
        ("accepted", types.INVALID_REQUEST),
        ("html", types.INVALID_REQUEST),
    ],
)
async def test_failures_map_to_the_sdk_clients_errors(url: str, name: str, code: int, sender: str) -> None:
    with pytest.raises(MCPError) as caught:
        await call(url, name, sender)
    assert caught.value.code == code


async def test_an_upstream_that_is_gone_is_connection_closed(sender: str) -> None:
    with serving(Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])) as base:
        gone = f"{base}/mcp"
    with pytest.raises(MCPError) as caught:
        await call(gone, "ok", sender)
    assert caught.value.code == types.CONNECTION_CLOSED


VERSION = MODERN
RESULTS: list[dict[str, Any]] = [
    {"content": [{"type": "text", "text": "ok"}], "resultType": "complete"},
    {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"a": 1}, "isError": False},
    {"content": "not a list", "resultType": "complete"},
    {"content": [{"type": "nonsense"}]},
    {"resultType": "input_required", "inputRequests": {}, "requestState": "s"},
    {"resultType": "input_required", "inputRequests": "not a map"},
]


def sdk_client_verdict(version: str, raw: dict[str, Any]) -> str | None:
    """What the SDK client's checks say of a result: None (accepted), or the lean path's message."""
    try:
        mcp_methods.validate_server_result("tools/call", version, raw)
        asks = raw.get("resultType") == "input_required"
        (types.InputRequiredResult if asks else types.CallToolResult).model_validate(raw, by_name=False)
    except ValidationError as exc:
        return f"Invalid tools/call result: {exc}"
    return None


@pytest.mark.parametrize("raw", RESULTS)
def test_a_result_is_judged_as_the_sdk_client_judges_it(raw: dict[str, Any]) -> None:
    """The lean path checks a result's schema once the SDK's function has set up the version's
    adapter; the first result and every later one are accepted or refused as the SDK refuses them."""
    version = VERSION
    expected = sdk_client_verdict(version, dict(raw))
    for _ in range(2):  # the SDK's function on a version's first result, the kept adapter after
        try:
            lean_upstream._result(version, dict(raw))
        except MCPError as exc:
            assert (exc.code, exc.message) == (types.INVALID_PARAMS, expected)
        else:
            assert expected is None


def test_an_unknown_version_is_refused_as_the_sdk_refuses_it() -> None:
    with pytest.raises(ValueError, match="known protocol version"):
        lean_upstream._result("1999-01-01", dict(RESULTS[0]))


OFFERED = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}}
"""The client capabilities the proxy's SDK client declares (the input requests it can relay)."""


@pytest.mark.parametrize(
    ("declared", "relayed"),
    [
        ({}, {}),
        ({"elicitation": {"form": {}}}, {"elicitation": {"form": {}}}),
        (
            {"roots": {"listChanged": False}, "sampling": {}},
            {"sampling": {}, "roots": {"listChanged": False}},
        ),
        ({"experimental": {"acme": {}}, "tasks": {}}, {}),
    ],
    ids=["nothing", "elicitation-form-only", "sampling-and-roots", "only-what-the-proxy-cannot-relay"],
)
def test_an_agents_call_declares_what_both_the_agent_and_the_proxy_can(
    declared: dict[str, Any], relayed: dict[str, Any]
) -> None:
    capabilities = types.ClientCapabilities.model_validate(declared)
    assert lean_upstream.relayed_capabilities(OFFERED, capabilities) == relayed


async def test_a_call_for_an_agent_is_sent_with_the_agents_capabilities(url: str, sender: str) -> None:
    """Inside ``relaying_for`` the envelope's capabilities are the agent's; outside, the client's."""
    proxy_envelope = {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": OFFERED}
    async with httpx2.AsyncClient() as http:
        lean = LeanUpstream("up", url, http, {})
        if sender == "httpx":
            lean.plain = None
        lean.tap.envelope = proxy_envelope
        try:
            with lean_upstream.relaying_for(types.ClientCapabilities.model_validate({"roots": {}})):
                await lean.call("ok", {}, {}, timeout=30)
            for_agent = SEEN[-1]["body"]["params"]["_meta"]
            await lean.call("ok", {}, {}, timeout=30)
            own = SEEN[-1]["body"]["params"]["_meta"]
        finally:
            await lean.aclose()
    assert for_agent == {**proxy_envelope, "io.modelcontextprotocol/clientCapabilities": {"roots": {}}}
    assert own == proxy_envelope
    assert lean_upstream.AGENT_CAPABILITIES.get() is None


def test_an_input_request_the_agent_cannot_answer_is_refused_saying_so() -> None:
    asks = {
        "name": types.ElicitRequest(params=types.ElicitRequestFormParams(message="?", requested_schema={}))
    }
    nothing = types.ClientCapabilities()
    with pytest.raises(MCPError) as caught:
        lean_upstream.refuse_undeclared("up", asks, nothing)
    assert caught.value.code == types.INVALID_REQUEST
    assert caught.value.message == (
        "upstream 'up' asked for elicitation/create, but the agent's client did not declare the "
        "elicitation capability"
    )
    lean_upstream.refuse_undeclared("up", asks, types.ClientCapabilities.model_validate({"elicitation": {}}))
    lean_upstream.refuse_undeclared("up", asks, None)  # the proxy's own request: the relay decides
