"""The lean relay (proxy/relay_lean.py, proxy/lean_upstream.py) answers exactly as the SDK path does.

Two ``shadowguard serve`` processes, each over a notes fixture of its own (HTTP, transactional; the
same data): one with the lean relay on uvloop (the defaults), one with ``proxy.lean_relay: false`` on
the standard asyncio loop. The same raw 2026-07-28 requests go to both; their answers (status,
content type, JSON body) must be equal once the ids the guard mints per call (call ids, approval ids
and expiry times) are blanked. ``/metrics`` shows which path answered."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from benchmark.fixtures import NOTES_POLICY
from tests.support.processes import Process, notes_http, shadowguard_serving
from tests.support.proxy import ENVELOPE, MODERN, write_config

pytestmark = pytest.mark.anyio

PACK = NOTES_POLICY.read_text(encoding="utf-8") + (
    "approvals:\n  - id: notes.delete_needs_review\n    source: {ref: handbook}\n    tools: [delete_note]\n"
)
MINTED = ("call_id", "approval_id", "approval_expires_at")


@dataclass
class Pair:
    lean: Process
    sdk: Process


@pytest.fixture(scope="module")
def pair(module_tmp: Path) -> Iterator[Pair]:
    pack = module_tmp / "pack.yaml"
    pack.write_text(PACK, encoding="utf-8")
    configs, upstreams = {}, []
    for name, lean in (("lean", True), ("sdk", False)):
        folder = module_tmp / name
        folder.mkdir()
        notes = notes_http(folder / "notes.sqlite").ready()
        upstreams.append(notes)
        configs[name] = write_config(
            folder / "proxy.yaml",
            [{"name": "notes", "transport": "http", "url": notes.url, "policy": str(pack)}],
            http={"host": "127.0.0.1", "port": 0},
            approvals={"store": "sqlite:///approvals.db", "wait_s": 0},
            # the lean proxy on uvloop (the default), the SDK one on the standard loop
            proxy={"lean_relay": lean, "event_loop": "uvloop" if lean else "asyncio"},
        )
    try:
        with shadowguard_serving(configs) as proxies:
            yield Pair(proxies["lean"], proxies["sdk"])
    finally:
        for notes in upstreams:
            notes.stop()


def blank(value: Any) -> Any:
    """``value`` with what is minted per call replaced by a placeholder (ids in texts too)."""
    if isinstance(value, dict):
        return {k: "<minted>" if k in MINTED else blank(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [blank(v) for v in value]
    if isinstance(value, str):
        return re.sub(
            r"[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{4}-\d\d-\d\dT[\d:.+]+",
            "<id>",
            value,
        )
    return value


async def post(base: str, params: Any, *, method: str = "tools/call", meta: bool = True) -> tuple[Any, ...]:
    """(status, content type, JSON body) of one raw 2026-07-28 request."""
    if meta and isinstance(params, dict):
        params = {**params, "_meta": {**ENVELOPE, **params.get("_meta", {})}}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if isinstance(params, dict) and isinstance(params.get("name"), str):
        headers["Mcp-Name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
        response = await http.post("/mcp", content=json.dumps(body).encode(), headers=headers)
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return response.status_code, kind, json.loads(data[-1])
    return response.status_code, kind, response.json()


async def lean_calls(process: Process) -> dict[str, float]:
    """``shadowguard_relay_calls_total`` by path, from the proxy's ``/metrics``."""
    async with httpx2.AsyncClient(base_url=process.base, timeout=30) as http:
        text = (await http.get("/metrics")).text
    found = re.findall(r'^shadowguard_relay_calls_total\{path="(\w+)"\} ([\d.e+]+)$', text, re.M)
    return {path: float(value) for path, value in found}


def cases(session: str) -> list[tuple[str, Any]]:
    named = {"shadowguard/session": session}
    return [
        ("ok read, sessionless", {"name": "get_note", "arguments": {"id": "nope"}}),
        ("ok write", {"name": "put_note", "arguments": {"id": "n-lean", "body": "hi"}, "_meta": named}),
        ("ok read", {"name": "get_note", "arguments": {"id": "n-lean"}, "_meta": named}),
        ("rolled back by rule", {"name": "put_note", "arguments": {"id": "n-x", "body": ""}, "_meta": named}),
        ("tool error (arguments)", {"name": "get_note", "arguments": {"id": ["n1"]}, "_meta": named}),
        ("held for approval", {"name": "delete_note", "arguments": {"id": "n-lean"}, "_meta": named}),
        ("unknown tool", {"name": "no_such_tool", "arguments": {}}),
        ("reserved tool", {"name": "__reserved__dump", "arguments": {}}),
        (
            "_meta passthrough",
            {"name": "echo_meta", "arguments": {}, "_meta": {**named, "acme/trace": "t-1"}},
        ),
        (
            "bad session id",
            {"name": "get_note", "arguments": {"id": "n1"}, "_meta": {"shadowguard/session": 7}},
        ),
        ("bad params: arguments", {"name": "get_note", "arguments": "not an object"}),
        ("bad params: no name", {"arguments": {}}),
        (
            "progress token",
            {"name": "get_note", "arguments": {"id": "n-lean"}, "_meta": {**named, "progressToken": 5}},
        ),
        ("rollback", {"name": "rollback", "arguments": {}, "_meta": named}),
    ]


async def test_the_lean_relay_answers_as_the_sdk_path_does(pair: Pair) -> None:
    before = await lean_calls(pair.lean)
    run = uuid.uuid4().hex[:8]
    for label, params in cases(f"eq-{run}"):
        lean = await post(pair.lean.base, params)
        sdk = await post(pair.sdk.base, params)
        assert blank(lean) == blank(sdk), f"{label}:\n{json.dumps(blank(lean))}\n{json.dumps(blank(sdk))}"
    after = await lean_calls(pair.lean)
    agent = after.get("lean_agent", 0) - before.get("lean_agent", 0)
    assert agent >= 9, f"the lean path answered {agent} calls: {after}"
    assert after.get("lean_upstream", 0) > before.get("lean_upstream", 0), after
    tx = after.get("lean_tx", 0) - before.get("lean_tx", 0)
    assert tx >= 3, f"begin, the after-call checks and the rollback of a write went lean {tx} times: {after}"
    assert await lean_calls(pair.sdk) == {}, "lean_relay: false sends everything through the SDK"


async def test_other_requests_still_reach_the_sdk_app(pair: Pair) -> None:
    """tools/list, a batch and a handshake-era client are the SDK's; they answer on both proxies."""
    for process in (pair.lean, pair.sdk):
        status, _, listed = await post(process.base, {}, method="tools/list")
        assert status == 200 and {t["name"] for t in listed["result"]["tools"]} >= {"get_note", "commit"}
        status, _, batch = await post(process.base, [{"jsonrpc": "2.0"}], meta=False)
        assert status == 400 and batch["error"]["code"] == -32600


async def test_a_session_that_only_read_ends_without_asking_for_its_changes(pair: Pair) -> None:
    """Its reads reported every change they made (none), so what the rollback discards is known: the
    upstream is sent begin and rollback, not a ``changes`` request between them (issue 18)."""
    named = {"shadowguard/session": f"ro-{uuid.uuid4().hex[:8]}"}
    before = await lean_calls(pair.lean)
    read_note = {"name": "get_note", "arguments": {"id": "n1"}, "_meta": named}
    for _ in range(2):
        status, _, read = await post(pair.lean.base, read_note)
        assert status == 200 and "result" in read, read
    status, _, ended = await post(pair.lean.base, {"name": "rollback", "arguments": {}, "_meta": named})
    assert status == 200 and ended["result"]["structuredContent"]["changes"] == 0, ended
    after = await lean_calls(pair.lean)
    assert after.get("lean_tx", 0) - before.get("lean_tx", 0) == 2, (before, after)
