"""``shadowguard env serve`` as a real MCP server: subprocesses over stdio and HTTP, driven by SDK clients.

Reference texts and hashes come from the recorded vectors and the answer key (tests may read it; the
server never does).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import typer
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INVALID_PARAMS
from typer.testing import CliRunner

from benchmark.cli import env_app
from benchmark.envs import Database, Environment, UnknownTableError, load_domain
from benchmark.envs.server import (
    SESSION_META_KEY,
    EnvSessions,
    close_environment,
    environment_state_hash,
    init_environment,
    session_meta,
)
from benchmark.procs import startup_timeout_s
from benchmark.tasks import BenchData, Task, resolve_data
from tests.support.proxy import request_meta

DOMAIN = "sandbox_external_retail"
READ_TOOLS = ("check_inventory", "get_order", "zendesk_get_tables")
# Write tools with probes on the init state (prefix 0), in order of preference.
WRITE_TOOLS = (
    "update_order_address",
    "add_points_to_balance",
    "update_membership_status",
    "reship_order",
    "cancel_installation",
    "zendesk_create_item",
)
ORDERS = "external_retail_toolset_oms_models_orders"

pytestmark = pytest.mark.anyio


# -- reference data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    data: BenchData
    task: Task
    other_domain_task: Task
    init_hash: str
    reads: list[dict[str, Any]]
    write: dict[str, Any]
    defaults_hash: str


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


@pytest.fixture(scope="module")
def ref() -> Reference:
    data = resolve_data()
    vectors = data.bundle / "vectors"
    writes = [
        r
        for r in _jsonl(vectors / "write_probes.jsonl")
        if r["domain"] == DOMAIN
        and r["prefix_len"] == 0
        and not r["extra_prefix"]
        and r["state_changed"]
        and r["tool"] in WRITE_TOOLS
    ]
    write = min(writes, key=lambda r: WRITE_TOOLS.index(r["tool"]))
    tasks = data.tasks()
    task = next(t for t in tasks if t.id == write["task_id"])
    reads = []
    for r in _jsonl(vectors / "read_probes.jsonl"):
        if r["task_id"] == task.id and r["state"] == "init" and r["tool"] in READ_TOOLS:
            reads.append(r)
        elif reads and r["task_id"] != task.id:
            break
    assert {r["tool"] for r in reads} == set(READ_TOOLS)
    assert task.answer.expected is not None
    with Environment(load_domain(DOMAIN, data.bundle), Database()) as env:
        defaults_hash = env.state_hash()
    return Reference(
        data=data,
        task=task,
        other_domain_task=next(t for t in tasks if t.domain != DOMAIN),
        init_hash=task.answer.expected.init_db_hash,
        reads=reads,
        write=write,
        defaults_hash=defaults_hash,
    )


@pytest.fixture(scope="module")
def schemas(ref: Reference) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((ref.data.bundle / "tool_schemas.json").read_text())[DOMAIN]
    return entries


def _command(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("shadowguard")
    if script.is_file():
        return [str(script), *args]
    return [sys.executable, "-c", "from proxy.cli import main; main()", *args]


def _serve_args(ref: Reference, *extra: str) -> list[str]:
    return _command("env", "serve", "--domain", DOMAIN, "--data", str(ref.data.tasks_root), *extra)


# -- shared assertions ----------------------------------------------------------------------------------


async def _check_tools(client: Client, schemas: list[dict[str, Any]], ref: Reference) -> None:
    listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [s["name"] for s in schemas]
    assert len(listed) == 33
    engine = load_domain(DOMAIN, ref.data.bundle).tools
    for tool, schema in zip(listed, schemas, strict=True):
        assert tool.description == schema["description"]
        assert tool.input_schema == schema["input_schema"]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (not engine[tool.name].writes)
    assert not any(t.name.startswith("__reserved__") for t in listed)
    read_only = {t.name for t in listed if t.annotations and t.annotations.read_only_hint}
    assert set(READ_TOOLS) <= read_only
    assert ref.write["tool"] not in read_only


async def _text(client: Client, name: str, arguments: dict[str, Any], session_id: str | None = None) -> str:
    meta = session_meta(session_id)
    result = await client.call_tool(name, arguments, meta=None if meta is None else request_meta(meta))
    assert result.is_error is False
    assert result.structured_content is None
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


async def _check_session_flow(client: Client, ref: Reference, session_id: str | None = None) -> None:
    """Init by task id, reference reads, a write that moves the hash, and close."""
    s = client.session
    assert await environment_state_hash(s, session_id=session_id) == ref.defaults_hash
    assert await init_environment(s, task_id=ref.task.id, session_id=session_id) == ref.init_hash
    for probe in ref.reads:
        assert await _text(client, probe["tool"], probe["parameters"], session_id) == probe["response"], probe
    w = ref.write
    assert w["hash_before"] == ref.init_hash
    assert await _text(client, w["tool"], w["parameters"], session_id) == w["response"]
    assert await environment_state_hash(s, session_id=session_id) == w["hash_after"] != ref.init_hash
    assert await _text(client, "no_such_tool", {}, session_id) == "Unknown tool: no_such_tool"
    reserved = await _text(client, "__reserved__init", {"config": {}}, session_id)
    assert reserved == "Unknown tool: __reserved__init"
    # re-init discards the write
    assert await init_environment(s, data_patch=ref.task.data_patch, session_id=session_id) == ref.init_hash
    await close_environment(s, session_id=session_id)
    assert await environment_state_hash(s, session_id=session_id) == ref.defaults_hash


async def _check_bad_inputs(client: Client, ref: Reference, session_id: str | None = None) -> None:
    s = client.session
    assert await init_environment(s, task_id=ref.task.id, session_id=session_id) == ref.init_hash
    bad: list[tuple[dict[str, Any], str]] = [
        ({"task_id": "no/such:task"}, "unknown task id 'no/such:task'"),
        ({"task_id": ref.other_domain_task.id}, f"belongs to domain {ref.other_domain_task.domain}"),
        ({"data_patch": {"no_such_table": []}}, "Unknown table: no_such_table"),
        ({"data_patch": {ORDERS: [{"id": {"nested": 1}}]}}, f"data_patch.{ORDERS}[0]"),
        ({"data_patch": {ORDERS: {"id": "x"}}}, "must be a list of rows"),
    ]
    for kwargs, message in bad:
        with pytest.raises(MCPError) as info:
            await init_environment(s, session_id=session_id, **kwargs)
        assert info.value.code == INVALID_PARAMS, kwargs
        assert message in info.value.message, (kwargs, info.value.message)
        assert await environment_state_hash(s, session_id=session_id) == ref.init_hash
    malformed: list[tuple[dict[str, Any], str]] = [
        ({}, "exactly one of task_id or data_patch"),
        ({"task_id": ref.task.id, "data_patch": {}}, "exactly one of task_id or data_patch"),
        ({"task_id": 7}, "task_id must be a non-empty string"),
        ({"data_patch": [1]}, "data_patch must be an object"),
        ({"taskid": "x"}, "unknown parameter(s) ['taskid']"),
    ]
    for params, message in malformed:
        with pytest.raises(MCPError) as info:
            await _raw_init(client, params, session_id)
        assert info.value.code == INVALID_PARAMS
        assert message in info.value.message, (params, info.value.message)
    assert await environment_state_hash(s, session_id=session_id) == ref.init_hash


async def _raw_init(client: Client, params: dict[str, Any], session_id: str | None) -> None:
    from benchmark.envs.server import EnvInitParams, EnvInitRequest, EnvStateResult

    body = {"_meta": session_meta(session_id), **params}
    request = EnvInitRequest(params=EnvInitParams.model_validate(body))
    await client.session.send_request(request, EnvStateResult)


# -- stdio ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_stdio(mode: str, ref: Reference, schemas: list[dict[str, Any]]) -> None:
    args = _serve_args(ref, "--stdio")
    params = StdioServerParameters(command=args[0], args=args[1:], env=dict(os.environ))
    async with Client(params, mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        await _check_tools(client, schemas, ref)
        await _check_session_flow(client, ref)
        await _check_bad_inputs(client, ref)
        # the process's own session and a _meta-named one are separate environments
        assert await init_environment(client.session, task_id=ref.task.id) == ref.init_hash
        assert await environment_state_hash(client.session, session_id="other") == ref.defaults_hash


# -- streamable HTTP ------------------------------------------------------------------------------------


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]

    def health(self) -> dict[str, Any]:
        base = self.url.removesuffix("/mcp")
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            body: dict[str, Any] = json.loads(response.read())
        return body


@pytest.fixture(scope="module")
def http_server(ref: Reference) -> Iterator[HttpServer]:
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            _serve_args(ref, "--host", "127.0.0.1", "--port", "0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + startup_timeout_s()
            url = None
            while url is None:
                log.seek(0)
                found = re.search(rb"listening on (http://\S+)", log.read())
                if found:
                    url = found.group(1).decode()
                elif process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"server did not start (exit {process.poll()}): {log.read().decode()}")
                else:
                    time.sleep(0.05)
            yield HttpServer(url, process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.seek(0)
        assert "Traceback" not in log.read().decode()


async def test_http_legacy(http_server: HttpServer, ref: Reference, schemas: list[dict[str, Any]]) -> None:
    async with Client(http_server.url, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        await _check_tools(client, schemas, ref)
        await _check_session_flow(client, ref)
        await _check_bad_inputs(client, ref)


async def test_http_2026(http_server: HttpServer, ref: Reference, schemas: list[dict[str, Any]]) -> None:
    async with Client(http_server.url, mode="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28"
        await _check_tools(client, schemas, ref)
        await _check_session_flow(client, ref, session_id="flow-2026")
        await _check_bad_inputs(client, ref, session_id="bad-2026")
        # sessionless and no session id: reads and writes are refused, unknown tools still answer in-band
        with pytest.raises(MCPError) as info:
            await client.call_tool(ref.write["tool"], ref.write["parameters"])
        assert info.value.code == INVALID_PARAMS
        assert SESSION_META_KEY in info.value.message
        with pytest.raises(MCPError):
            await environment_state_hash(client.session)
        assert await _text(client, "no_such_tool", {}) == "Unknown tool: no_such_tool"
        with pytest.raises(MCPError) as info:
            await environment_state_hash(client.session, session_id="")
        assert info.value.code == INVALID_PARAMS


async def test_http_sessions_are_isolated(http_server: HttpServer, ref: Reference) -> None:
    w = ref.write
    async with (
        Client(http_server.url, mode="legacy") as a,
        Client(http_server.url, mode="legacy") as b,
        Client(http_server.url, mode="2026-07-28") as c,
    ):
        for client, sid in ((a, None), (b, None), (c, "iso-c"), (c, "iso-d")):
            digest = await init_environment(client.session, task_id=ref.task.id, session_id=sid)
            assert digest == ref.init_hash
        assert await _text(a, w["tool"], w["parameters"]) == w["response"]
        assert await _text(c, w["tool"], w["parameters"], "iso-c") == w["response"]
        assert await environment_state_hash(a.session) == w["hash_after"]
        assert await environment_state_hash(b.session) == ref.init_hash
        assert await environment_state_hash(c.session, session_id="iso-c") == w["hash_after"]
        assert await environment_state_hash(c.session, session_id="iso-d") == ref.init_hash
        # a 2026 session id is shared by every connection that names it
        assert await environment_state_hash(a.session, session_id="iso-c") == w["hash_after"]
        open_sessions = (await anyio.to_thread.run_sync(http_server.health))["sessions"]
        await close_environment(c.session, session_id="iso-c")
        await close_environment(c.session, session_id="iso-d")
    # legacy clients DELETE their session on exit, which closes its environment
    after = (await anyio.to_thread.run_sync(http_server.health))["sessions"]
    assert after == open_sessions - 4


def test_cli_errors(ref: Reference, tmp_path: Path) -> None:
    runner, cli = CliRunner(), typer.Typer()
    cli.add_typer(env_app, name="env")
    unknown = runner.invoke(cli, ["env", "serve", "--domain", "nope", "--stdio"])
    assert unknown.exit_code == 2
    assert "unknown domain" in unknown.output
    no_data = runner.invoke(cli, ["env", "serve", "--domain", DOMAIN, "--data", str(tmp_path), "--stdio"])
    assert no_data.exit_code == 2
    assert "neither a data export" in " ".join(no_data.output.split())
    bad_db = runner.invoke(cli, ["env", "serve", "--domain", DOMAIN, "--db", "mysql://x/y", "--stdio"])
    assert bad_db.exit_code == 2
    assert "unsupported database" in bad_db.output


# -- the session store in-process (no transport) ------------------------------------------------------


async def test_sessions_reap_idle_and_cap(ref: Reference, sqlite_db: Database) -> None:
    now = [0.0]
    sessions = EnvSessions(
        load_domain(DOMAIN, ref.data.bundle), sqlite_db, idle_timeout=60, max_sessions=2, clock=lambda: now[0]
    )
    try:
        assert await sessions.init("a", ref.task.data_patch) == ref.init_hash
        assert await sessions.state_hash("b") == ref.defaults_hash
        with pytest.raises(MCPError) as info:
            await sessions.state_hash("c")
        assert "too many environment sessions (2)" in info.value.message
        now[0] = 61.0
        assert await sessions.state_hash("c") == ref.defaults_hash  # a and b were idle: reaped
        assert "a" not in sessions and "b" not in sessions and len(sessions) == 1
        with pytest.raises(UnknownTableError):
            await sessions.init("c", {"nope": []})
        assert await sessions.state_hash("c") == ref.defaults_hash
        assert await sessions.close("c") is True
        assert await sessions.close("c") is False
    finally:
        sessions.close_all()


async def test_sessions_run_concurrently_in_isolation(ref: Reference, database: Database) -> None:
    sessions = EnvSessions(load_domain(DOMAIN, ref.data.bundle), database)
    w = ref.write
    hashes: dict[str, tuple[str, str]] = {}

    async def attempt(key: str, write: bool) -> None:
        init = await sessions.init(key, ref.task.data_patch)
        if write:
            assert await sessions.call_tool(key, w["tool"], w["parameters"]) == w["response"]
        hashes[key] = (init, await sessions.state_hash(key))

    try:
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(attempt, f"s{i}", i % 2 == 0)
    finally:
        sessions.close_all()
    assert hashes == {
        f"s{i}": (ref.init_hash, w["hash_after"] if i % 2 == 0 else ref.init_hash) for i in range(4)
    }
