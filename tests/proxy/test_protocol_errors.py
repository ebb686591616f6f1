"""Bad input on the wire gets a proper JSON-RPC error, and the proxy keeps serving.

Raw HTTP requests to the shared ``shadowguard serve`` (both eras), and raw lines on the stdin of a
``shadowguard serve --stdio`` (both eras), which also serves its HTTP app on a side port.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client

from tests.support.processes import SHADOWGUARD
from tests.support.proxy import ENVELOPE, MAX_BODY_BYTES, MODERN, journal_upstream, write_config

pytestmark = pytest.mark.anyio

ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _message(response: httpx2.Response) -> dict[str, Any]:
    """The one JSON-RPC message of a response, whether sent as JSON or as an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(next(d for d in data if d)))
    return dict(response.json())


class Raw:
    """Hand-written requests in one era (2026-07-28: envelope and headers; legacy: a handshake)."""

    def __init__(self, http: httpx2.AsyncClient, mode: str) -> None:
        self.http = http
        self.mode = mode
        self.headers = dict(ACCEPT)
        self.ids = iter(range(1, 1000))

    async def open(self) -> None:
        if self.mode == MODERN:
            self.headers["MCP-Protocol-Version"] = MODERN
            return
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        response = await self.http.post("/mcp", json=init, headers=self.headers)
        assert response.status_code == 200, response.text
        self.headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = _message(response)["result"]["protocolVersion"]
        await self.http.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )

    async def close(self) -> None:
        if self.mode != MODERN:
            await self.http.delete("/mcp", headers=self.headers)

    async def post(self, body: Any, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
        headers = dict(self.headers)
        if self.mode == MODERN and isinstance(body, dict) and isinstance(body.get("method"), str):
            headers["Mcp-Method"] = body["method"]
            name = (body.get("params") or {}).get("name")
            if body["method"] == "tools/call" and isinstance(name, str):
                headers["Mcp-Name"] = name
        content = raw if raw is not None else json.dumps(body).encode()
        response = await self.http.post("/mcp", content=content, headers=headers)
        if response.status_code == 413:
            return 413, {}
        return response.status_code, _message(response)

    async def request(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.mode == MODERN:
            params = {**params, "_meta": {**ENVELOPE, **params.get("_meta", {})}}
        return await self.post({"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params})


def error_code(message: dict[str, Any]) -> int:
    assert "error" in message, message
    return int(message["error"]["code"])


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_http_bad_requests_get_json_rpc_errors(http_proxy: Any, mode: str) -> None:
    session = {"shadowguard/session": f"raw-{mode}"}
    async with httpx2.AsyncClient(base_url=http_proxy.base, timeout=60) as http:
        raw = Raw(http, mode)
        await raw.open()

        status, message = await raw.post(None, raw=b'{"jsonrpc": "2.0", "id": 1, "method": ')
        assert (status, error_code(message), message["id"]) == (400, -32700, None)
        status, message = await raw.post({"hello": "world"})
        # Not a JSON-RPC message: -32600; the SDK's handshake-era transport answers -32602 (its own choice).
        assert (status, message["id"]) == (400, None)
        assert error_code(message) == (-32600 if mode == MODERN else -32602)

        _, message = await raw.request("no/such/method", {})
        assert error_code(message) == -32601
        _, message = await raw.request("tools/call", {"name": "get_note", "arguments": "not an object"})
        assert error_code(message) == -32602
        _, message = await raw.request("tools/call", {"arguments": {}})
        assert error_code(message) == -32602
        _, message = await raw.request(
            "tools/call", {"name": "get_note", "arguments": {"id": "n1"}, "_meta": {"shadowguard/session": 7}}
        )
        assert error_code(message) == -32602
        assert "shadowguard/session" in message["error"]["message"]
        if mode == MODERN:
            # No session named: a read runs on its own (docs/adr/008), it is no protocol error.
            _, message = await raw.request("tools/call", {"name": "get_note", "arguments": {"id": "n1"}})
            assert message["result"]["_meta"]["shadowguard/outcome"]["sessionless"] is True

        big = {"id": "x" * (MAX_BODY_BYTES + 1)}
        status, _ = await raw.request("tools/call", {"name": "get_note", "arguments": big, "_meta": session})
        assert status == 413

        # Wrong argument types for the tool's own schema are the agent's to fix: a tool error with a
        # precise hint (the guard's invalid_arguments), not a protocol error.
        _, message = await raw.request(
            "tools/call", {"name": "get_note", "arguments": {"id": ["n1"]}, "_meta": session}
        )
        assert message["result"]["isError"] is True
        assert message["result"]["structuredContent"]["error_class"] == "invalid_arguments"

        _, message = await raw.request(
            "tools/call", {"name": "get_note", "arguments": {"id": "n1"}, "_meta": session}
        )
        assert message["result"]["structuredContent"] == {
            "id": "n1",
            "body": "first note",
            "status": "published",
        }
        await raw.close()

    async with Client(http_proxy.url, mode=mode, cache=None) as client:
        assert (await client.list_tools()).tools


@pytest.mark.parametrize("mode", ["legacy"])
async def test_stdio_bad_lines_get_json_rpc_errors_and_the_side_port_serves(
    module_tmp: Path, upstreams: Any, mode: str
) -> None:
    config = write_config(
        module_tmp / f"stdio-{mode}.yaml",
        [journal_upstream(upstreams.journal.url)],
        http={"host": "127.0.0.1", "port": 0, "max_body_bytes": 4096},
    )
    log = module_tmp / f"stdio-{mode}.log"
    with log.open("wb") as stderr:
        process = await anyio.open_process(
            [SHADOWGUARD, "serve", "--config", str(config), "--stdio"], stderr=stderr
        )
    async with process:
        assert process.stdin is not None and process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        meta = {"_meta": ENVELOPE} if mode == MODERN else {}

        async def send(line: Any) -> None:
            data = line if isinstance(line, bytes) else json.dumps(line).encode()
            await process.stdin.send(data + b"\n")  # type: ignore[union-attr]

        async def receive() -> dict[str, Any]:
            with anyio.fail_after(60):
                return dict(json.loads(await lines.receive_until(b"\n", 1 << 20)))

        await send(b"this is not json")
        assert await receive() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error: the line is not JSON"},
        }
        await send({"jsonrpc": "2.0", "result": 5})
        assert error_code(await receive()) == -32600
        # A line over http.max_body_bytes is skipped (never held whole) and answered -32600.
        await send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"x": "y" * 20_000}})
        too_long = await receive()
        assert error_code(too_long) == -32600 and too_long["id"] is None
        assert "over the limit of 4096 bytes (http.max_body_bytes)" in too_long["error"]["message"]
        if mode != MODERN:
            init = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }
            await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            assert (await receive())["result"]["serverInfo"]["name"] == "shadowguard"
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await send({"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": meta})
        assert error_code(await receive()) == -32601
        await send(
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "j_get_note", **meta}}
        )
        missing = (await receive())["result"]
        assert missing["isError"] is True
        assert missing["structuredContent"]["error_class"] == "invalid_arguments"
        await send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 5, **meta}})
        assert error_code(await receive()) == -32602
        await send(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "j_get_note", "arguments": {"id": "n1"}, **meta},
            }
        )
        answer = await receive()
        assert answer["result"]["structuredContent"]["body"] == "first note"
        session = answer["result"]["_meta"]["shadowguard/outcome"]["session"]
        assert session.startswith("stdio:")

        side = next(line for line in log.read_text().splitlines() if "listening on" in line)
        base = side[side.index("http://") :].rsplit("/mcp", 1)[0]
        async with httpx2.AsyncClient(base_url=base) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["upstreams"] == {"journal": True, "approval store": True}
            sessions = (await http.get("/api/sessions")).json()["sessions"]
            assert [s["id"] for s in sessions] == [session]

        await process.stdin.aclose()
        with anyio.fail_after(30):
            assert await process.wait() == 0
