"""Defects the reliability probe found (issue 15), each on a real ``shadowguard serve`` process:

* a held call, or one a rule rolled back, left the session's SQLite write lock held for every other
  writer until the session ended;
* a call with 16,000 unexpected keys kept the proxy busy for a minute and a half (quadratic
  validation); now it is refused at once by the argument limits;
* ``commit`` after a kill -9 and restart answered ``committed: true`` over writes that were gone;
* lone surrogates in a session id or in arguments broke the audit log, ``/api/sessions`` and the
  session's upstream connection;
* session ids: ``principal:<name>`` could be squatted, and ids holding ``/`` were listed but could
  not be addressed;
* ``/readyz`` stayed ready while the approval store was down.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml

from proxy.approvals.auth import hash_token
from tests.support.processes import SHADOWGUARD, NotesServer, kill, notes_http, shadowguard_serve
from tests.support.proxy import (
    ENVELOPE,
    MODERN,
    agent_on,
    direct_write,
    notes_http_upstream,
    notes_rows,
    notes_upstream,
    text,
    write_config,
)

pytestmark = pytest.mark.anyio

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN,
}
POLICY = {
    "version": 1,
    "name": "notes-reliability",
    "tools": {"allow": ["get_note", "list_notes", "put_note", "delete_note", "whoami"]},
    "checks": [
        {
            "id": "notes.body_not_empty",
            "phase": "after_call",
            "tools": ["put_note"],
            "source": {"ref": "Notes handbook §1", "quote": "Every note has a body."},
            "message": "A note needs a non-empty body.",
            "sql": "SELECT id FROM notes WHERE body = ''",
        }
    ],
    "approvals": [
        {
            "id": "notes.delete_needs_review",
            "source": {
                "ref": "Notes handbook §3",
                "quote": "A note is deleted only with an editor's approval.",
            },
            "tools": ["delete_note"],
        }
    ],
}


@pytest.fixture(scope="module")
def policy(module_tmp: Path) -> Path:
    path = module_tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def notes(module_tmp: Path) -> Iterator[NotesServer]:
    """The notes fixture over HTTP (transactional) on a database of this module's own."""
    process = notes_http(module_tmp / "notes.sqlite").ready()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def proxy(module_tmp: Path, notes: NotesServer, policy: Path) -> Iterator[Any]:
    config = write_config(
        module_tmp / "proxy.yaml",
        [notes_http_upstream(notes.url, policy)],
        http={"host": "127.0.0.1", "port": 0},
        audit={"path": str(module_tmp / "audit.jsonl")},
        approvals={"store": f"sqlite:///{module_tmp / 'approvals.db'}", "wait_s": 0},
        sessions={"store": f"sqlite:///{module_tmp / 'sessions.db'}"},
        # An approver exists, so a held call waits for review (with none it is refused at once).
        auth={
            "reviewers": [{"name": "ed", "role": "approver", "token_sha256": hash_token("reliability-ed")}]
        },
    )
    process = shadowguard_serve(config).ready()
    process.audit = module_tmp / "audit.jsonl"
    yield process
    assert process.stop() == 0, process.log.read_text()


def stdio_notes_config(folder: Path, name: str, marker: str, policy: Path) -> tuple[Path, Path]:
    """A proxy config ``folder/name.yaml`` whose notes upstream runs over stdio (started by the proxy,
    marked with ``marker``) on ``folder/name.sqlite``, with approval and session stores of its own in
    SQLite: returns the notes database and the config."""
    db = folder / f"{name}.sqlite"
    config = write_config(
        folder / f"{name}.yaml",
        [notes_upstream(db, marker, policy=str(policy))],
        http={"host": "127.0.0.1", "port": 0},
        approvals={"store": f"sqlite:///{folder / f'{name}-approvals.db'}", "wait_s": 0},
        sessions={"store": f"sqlite:///{folder / f'{name}-sessions.db'}"},
    )
    return db, config


def audit_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


async def raw_call(
    http: httpx2.AsyncClient,
    name: str,
    arguments: Any,
    meta: dict[str, Any] | None = None,
    *,
    body: bytes | None = None,
) -> dict[str, Any]:
    """One hand-written 2026-07-28 ``tools/call``; the JSON-RPC answer."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {**ENVELOPE, **(meta or {})}},
    }
    headers = {**HEADERS, "Mcp-Method": "tools/call"}
    if name.isascii():  # a header cannot carry the rest
        headers["Mcp-Name"] = name
    response = await http.post(
        "/mcp", content=body if body is not None else json.dumps(request), headers=headers
    )
    assert response.status_code < 500, response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(next(d for d in data if d)))
    return dict(response.json())


# -- the SQLite write lock ---------------------------------------------------------------------------


async def test_held_and_rolled_back_calls_leave_no_write_lock(proxy: Any, notes: NotesServer) -> None:
    async with agent_on(proxy.url, MODERN) as a, agent_on(proxy.url, MODERN) as b:
        held = await a.refused("delete_note", {"id": "n2"})
        assert held["verdict"] == "held", held
        assert direct_write(notes.db) is None
        note = f"b-{uuid.uuid4().hex[:8]}"
        await b.ok("put_note", {"id": note, "body": "from b", "status": "draft"})
        await b.ok("commit")

        rolled = await a.refused("put_note", {"id": "n1", "body": ""})
        assert rolled["verdict"] == "rolled_back", rolled
        assert direct_write(notes.db) is None
        await b.ok("put_note", {"id": note, "body": "again", "status": "draft"})
        await b.ok("commit")
        assert notes_rows(notes.db)[note]["body"] == "again"
        assert "n2" in notes_rows(notes.db)


# -- limits --------------------------------------------------------------------------------------------


async def test_the_wide_payload_is_refused_by_a_named_limit_and_audited(proxy: Any) -> None:
    arguments = {"id": "n1", "body": "x", **{f"k{i:05d}": "v" * 4 for i in range(16_000)}}
    session = f"wide-{uuid.uuid4().hex[:8]}"
    async with httpx2.AsyncClient(base_url=proxy.base, timeout=60) as http:
        answer = await raw_call(http, "put_note", arguments, {"shadowguard/session": session})
    result = answer["result"]
    assert result["isError"] is True
    verdict = result["structuredContent"]
    assert verdict["verdict"] == "refused" and verdict["error_class"] == "invalid_arguments"
    (problem,) = verdict["hint"]["fields"]
    assert problem["problem"] == "more than 4096 keys and items in all"
    assert "limits.max_argument_keys" in problem["expected"]
    records = [r for r in audit_records(proxy.audit) if r.get("session") == session]
    assert [(r["kind"], r["verdict"], r["error_class"]) for r in records] == [
        ("call", "refused", "invalid_arguments")
    ]


# -- lone surrogates -------------------------------------------------------------------------------------


async def test_lone_surrogates_are_refused_and_break_nothing(proxy: Any, notes: NotesServer) -> None:
    session = f"sur-{uuid.uuid4().hex[:8]}"
    note = f"s-{uuid.uuid4().hex[:8]}"
    meta = {"shadowguard/session": session}
    async with httpx2.AsyncClient(base_url=proxy.base, timeout=60) as http:
        kept = await raw_call(http, "put_note", {"id": note, "body": "kept", "status": "draft"}, meta)
        assert kept["result"].get("isError") is not True, kept

        # json.dumps writes a lone surrogate as the escape \ud800: what a hostile client sends.
        answer = await raw_call(http, "get_note", {"id": "n1"}, {"shadowguard/session": "\ud800"})
        assert answer["error"]["code"] == -32602 and "valid Unicode" in answer["error"]["message"]

        answer = await raw_call(http, "put_note", {"id": note, "body": "bad \udc00 text"}, meta)
        verdict = answer["result"]["structuredContent"]
        assert verdict["verdict"] == "refused" and verdict["error_class"] == "invalid_arguments"
        assert "not valid Unicode" in verdict["hint"]["fields"][0]["problem"]

        # The 2026-07-28 transport wants the name in a header too, which cannot carry it: refused there.
        answer = await raw_call(http, "no_such_\udc80_tool", {}, meta)
        assert "error" in answer or answer["result"]["isError"] is True
        answer = await raw_call(http, "no_such_tool_x", {}, meta)
        assert answer["result"]["structuredContent"]["error_class"] == "not_found"
        listed = await http.get("/api/sessions")
        assert listed.status_code == 200
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200 and 'tool="(unknown)"' in metrics.text
        assert "no_such_tool_x" not in metrics.text  # callers' text is no label: series stay bounded
        commit = await raw_call(http, "commit", {}, meta)
        assert commit["result"]["structuredContent"]["committed"] is True, commit
    assert notes_rows(notes.db)[note]["body"] == "kept"
    records = [r for r in audit_records(proxy.audit) if r.get("session") == session]
    assert [r["verdict"] for r in records if r["kind"] == "call"] == ["allowed", "refused"]
    unknown = [r for r in audit_records(proxy.audit) if r.get("tool") == "no_such_tool_x"]
    assert len(unknown) == 1 and unknown[0]["verdict"] == "refused"


# -- session ids -------------------------------------------------------------------------------------------


async def test_session_ids_with_slashes_are_addressable(proxy: Any) -> None:
    session = f"team/{uuid.uuid4().hex[:6]}/agent"
    async with agent_on(proxy.url, MODERN) as agent:
        agent.session = session
        await agent.ok("put_note", {"id": f"sl-{uuid.uuid4().hex[:6]}", "body": "x", "status": "draft"})
    async with httpx2.AsyncClient(base_url=proxy.base, timeout=60) as http:
        got = await http.get(f"/api/sessions/{session}")
        assert got.status_code == 200 and got.json()["id"] == session, got.text
        rolled = await http.post(f"/api/sessions/{session}/rollback")
        assert rolled.status_code == 200 and rolled.json()["rolled_back"] is True, rolled.text
        gone = await http.get(f"/api/sessions/{session}")
        assert gone.status_code == 200 and gone.json()["in_transaction"] is False


# -- commit after a crash ------------------------------------------------------------------------------------


async def test_a_commit_after_kill_9_and_restart_is_refused_as_lost(
    module_tmp: Path, policy: Path, marker: str
) -> None:
    db, config = stdio_notes_config(module_tmp, "crash", marker, policy)
    process = shadowguard_serve(config).ready()
    note = f"c-{uuid.uuid4().hex[:8]}"
    try:
        async with agent_on(process.url, MODERN) as agent:
            session = agent.session
            await agent.ok("put_note", {"id": note, "body": "pending", "status": "draft"})
        kill(process.proc.pid)
        process.proc.wait(timeout=60)
        process.restart([SHADOWGUARD, "serve", "--config", str(config)])
        async with agent_on(process.url, MODERN) as agent:
            agent.session = session
            result = await agent.call("commit")
            assert result.is_error, text(result)
            assert result.structured_content is not None
            assert result.structured_content["committed"] is False
            (violation,) = result.structured_content["violations"]
            assert violation["rule_id"] == "changes_lost"
            assert "the proxy stopped before they were committed" in violation["message"]
            assert "still pending" not in text(result)
            # Told once: the session goes on (a new write, then a commit that keeps it).
            await agent.ok("put_note", {"id": note, "body": "redone", "status": "draft"})
            await agent.ok("commit")
        assert notes_rows(db)[note]["body"] == "redone"
    finally:
        assert process.stop() == 0, process.log.read_text()


# -- readiness ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A Redis of this test's own on a free port (it is stopped by the test)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield port, proc
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=10)


async def test_readyz_is_not_ready_while_the_approval_store_is_down(
    tmp_path: Path, notes: NotesServer, policy: Path, redis_server: tuple[int, Any]
) -> None:
    port, redis = redis_server
    config = write_config(
        tmp_path / "ready.yaml",
        [notes_http_upstream(notes.url, policy)],
        http={"host": "127.0.0.1", "port": 0},
        approvals={"store": f"redis://127.0.0.1:{port}/0", "wait_s": 0},
        sessions={"store": f"sqlite:///{tmp_path / 'sessions.db'}"},
    )
    process = shadowguard_serve(config).ready()
    try:
        async with httpx2.AsyncClient(base_url=process.base, timeout=60) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["upstreams"] == {"notes": True, "approval store": True}
            redis.terminate()
            redis.wait(timeout=10)
            down = await http.get("/readyz")
            assert down.status_code == 503, down.text
            assert down.json()["waiting_for"] == ["approval store"]
    finally:
        assert process.stop() == 0, process.log.read_text()


def identity(meta: dict[str, Any] | None, user: str | None) -> tuple[str | None, str | None]:
    """``session_identity`` of a 2026-07-28 HTTP request by ``user`` (None: unauthenticated)."""
    from mcp.server import ServerRequestContext
    from starlette.authentication import SimpleUser
    from starlette.requests import Request

    from proxy.server import session_identity

    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    if user is not None:
        scope["user"] = SimpleUser(user)
    context: ServerRequestContext[dict[str, Any], Request] = ServerRequestContext(
        session=None,  # type: ignore[arg-type]
        lifespan_context={},
        protocol_version=MODERN,
        method="tools/call",
        meta=meta,  # type: ignore[arg-type]
        request=Request(scope),
    )
    return session_identity(context, "stdio:x")


def test_nobody_can_squat_on_a_principals_session() -> None:
    from mcp import MCPError

    assert identity(None, "agent-a") == ("principal:agent-a", "agent-a")
    assert identity({"shadowguard/session": "principal:agent-a"}, "agent-a") == (
        "principal:agent-a",
        "agent-a",
    )
    for user in ("agent-b", None):
        with pytest.raises(MCPError) as refused:
            identity({"shadowguard/session": "principal:agent-a"}, user)
        assert refused.value.code == -32602 and "reserved" in refused.value.message


def test_another_principals_session_is_answered_as_an_unknown_id() -> None:
    from proxy.registry import SessionRegistry
    from proxy.server import GuardProxy

    proxy = GuardProxy([], SessionRegistry())
    proxy.sessions.open("shared-name", "agent-a")
    assert proxy._existing("shared-name", "agent-b") is None
    assert proxy._existing("shared-name", "agent-a") is proxy.sessions.get("shared-name", "agent-a")


# -- stopping ----------------------------------------------------------------------------------------


async def test_sigterm_stops_the_proxy_promptly_while_a_call_is_retrying(
    module_tmp: Path, policy: Path, marker: str
) -> None:
    """Another writer holds the upstream's write lock, so a session's write is retried by the guard
    (up to its 30 s deadline); SIGTERM must not wait for that."""
    db, config = stdio_notes_config(module_tmp, "stop", marker, policy)
    process = shadowguard_serve(config).ready()
    holder: sqlite3.Connection | None = None
    try:
        async with agent_on(process.url, MODERN) as agent:
            await agent.ok("get_note", {"id": "n1"})  # the upstream has created its database
            holder = sqlite3.connect(str(db), timeout=5, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            holder.execute("UPDATE notes SET body = 'held' WHERE id = 'n1'")

            async def write() -> None:
                # The proxy stops under the call: whatever it ends with is fine here.
                with contextlib.suppress(Exception):
                    await agent.call("put_note", {"id": "n2", "body": "blocked"})

            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await anyio.sleep(2.0)
                process.proc.terminate()
                code = await anyio.to_thread.run_sync(lambda: process.proc.wait(timeout=20))
                tg.cancel_scope.cancel()
        assert code == 0, process.log.read_text()
    finally:
        if holder is not None:
            holder.rollback()
            holder.close()
        process.stop()


# -- load (the small version of `shadowguard bench chaos load`) -----------------------------------------


def test_concurrent_sessions_writing_through_one_sqlite_upstream_all_commit(tmp_path: Path) -> None:
    from benchmark.chaos import run_load

    result = run_load(12, 2, retries=20, out=tmp_path, writers=1)
    assert (result.writes, result.failed) == (24, 0), result.line()
    assert result.first_try + result.retried == 24
