"""A session's first call on a transactional upstream takes the upstream's spare connection
(proxy/upstreams.py ``session_connection``): a 2026-07-28 HTTP spare is handed out without a ping (its
``begin`` is its first request), any other is pinged first; and a leg whose ``begin`` finds the
upstream gone leaves the session as it was (``ProxySession._not_begun``). A session gives a 2026-07-28
HTTP connection back between transactions and at its end (``Upstream.release``): the next session takes
it instead of a new one; a lost one is closed, and a stdio one stays with its session to its end. A
sessionless read's session, ended with its call, does not ask the approval store for pending requests
it cannot have.

The proxy runs in this process (its upstreams the notes fixture, over HTTP and over stdio, as
subprocesses); the agent talks to it in memory.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from benchmark.fixtures import NOTES_POLICY, NOTES_SERVER
from guard.approvals import SqlApprovalStore
from proxy.app import Recorder, create_app
from proxy.audit import AuditLog
from proxy.config import ProxyConfig, UpstreamConfig
from proxy.held import HeldCalls
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy
from proxy.upstream_connection import UpstreamConnection
from proxy.upstreams import Upstream
from tests.support.processes import NotesServer, notes_http, serving
from tests.support.proxy import Agent, notes_rows, text

pytestmark = pytest.mark.anyio


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The upstreams whose connection was pinged (``UpstreamConnection.answers``), in order."""
    asked: list[str] = []
    answers = UpstreamConnection.answers

    async def counted(self: UpstreamConnection, timeout: float = 5.0) -> bool:
        asked.append(self.upstream)
        return await answers(self, timeout)

    monkeypatch.setattr(UpstreamConnection, "answers", counted)
    return asked


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[NotesServer]:
    server = notes_http(tmp_path / "notes.sqlite").ready()
    try:
        yield server
    finally:
        server.stop()


def http_notes(name: str, url: str, **extra: Any) -> UpstreamConfig:
    return UpstreamConfig(name=name, transport="http", url=url, policy=NOTES_POLICY, **extra)


def stdio_notes(name: str, db: Path) -> UpstreamConfig:
    args = [str(NOTES_SERVER), "--db", str(db), "--transactional"]
    return UpstreamConfig(
        name=name,
        transport="stdio",
        command=sys.executable,
        args=args,
        policy=NOTES_POLICY,
        prefix=f"{name}_",
    )


@asynccontextmanager
async def agent_on(*specs: UpstreamConfig) -> AsyncIterator[Client]:
    proxy = GuardProxy([Upstream.from_settings(s) for s in specs], SessionRegistry())
    async with proxy.running(), Client(proxy.server, cache=None) as client:
        yield client


async def test_a_stateless_spare_is_not_pinged_and_a_stateful_one_is(
    notes: NotesServer, tmp_path: Path, pings: list[str]
) -> None:
    specs = (http_notes("notes", notes.url), stdio_notes("local", tmp_path / "local.sqlite"))
    async with agent_on(*specs) as client:
        for n in range(3):
            agent = Agent(client, f"first-call-{n}")
            assert "first note" in await agent.ok("get_note", {"id": "n1"})
            await agent.call("rollback")
        assert pings == [], "a 2026-07-28 HTTP spare is handed out without a ping"
        await Agent(client, "stdio-first").ok("local_get_note", {"id": "n1"})
    assert pings == ["local"], "a stdio spare is pinged before it is handed out"


async def test_an_upstream_gone_at_begin_leaves_the_session_as_it_was(
    notes: NotesServer, tmp_path: Path, pings: list[str]
) -> None:
    other = notes_http(tmp_path / "other.sqlite").ready()
    try:
        specs = (http_notes("notes", notes.url), http_notes("other", other.url, prefix="o_"))
        async with agent_on(*specs) as client:
            agent = Agent(client, "keeps-its-work")
            await agent.ok("put_note", {"id": "kept", "body": "written before the other upstream went"})
            other.stop()
            gone = await agent.refused("o_get_note", {"id": "n1"})
            assert [v["rule_id"] for v in gone["violations"]] == ["upstream_unavailable"]
            said = text(await agent.call("o_get_note", {"id": "n1"}))
            assert "The upstream 'other' is unavailable" in said and "The call was not sent." in said
            committed = await agent.commit()
            assert committed["committed"] is True
        assert notes_rows(notes.db)["kept"]["body"] == "written before the other upstream went"
        assert pings == []
    finally:
        other.stop()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The upstreams a connection was opened to (``UpstreamConnection.open``), in order."""
    made: list[str] = []
    open_connection = UpstreamConnection.open.__func__  # type: ignore[attr-defined]

    async def counted(
        cls: type[UpstreamConnection], task_group: Any, upstream: str, *a: Any, **k: Any
    ) -> Any:
        made.append(upstream)
        return await open_connection(cls, task_group, upstream, *a, **k)

    monkeypatch.setattr(UpstreamConnection, "open", classmethod(counted))
    return made


async def test_an_ended_sessions_connection_serves_the_next_session(
    notes: NotesServer, tmp_path: Path, opened: list[str]
) -> None:
    """Sessionless reads over HTTP (each a session of its own, ended with its call), on an HTTP and a
    stdio upstream, between writes of a named session."""
    specs = [http_notes("notes", notes.url), stdio_notes("local", tmp_path / "local.sqlite")]
    proxy = GuardProxy([Upstream.from_settings(s) for s in specs], SessionRegistry())
    with serving(create_app(proxy, ProxyConfig(), recorder=Recorder(AuditLog(None)))) as base:
        async with Client(f"{base}/mcp", mode="2026-07-28", cache=None) as client:
            sessionless, named = Agent(client), Agent(client, "writes")
            for n in range(5):
                read = await sessionless.call("get_note", {"id": "n1"})
                assert read.meta is not None and read.meta["shadowguard/outcome"]["sessionless"] is True
                assert "first note" in text(read)
                assert "first note" in await sessionless.ok("local_get_note", {"id": "n1"})
                await named.ok("put_note", {"id": f"w{n}", "body": "kept"})
            await named.commit()
    # The HTTP upstream: the start-up connection and the spares prepared when the first sessions took
    # them; every session since took one a session gave back (before: a new one each). A stdio
    # connection may hold its session's work (the process's own database): one per session, as before.
    assert opened.count("notes") <= 3 and opened.count("local") == 6, opened
    assert {f"w{n}" for n in range(5)} <= set(notes_rows(notes.db))


async def test_a_lost_connection_is_closed_not_given_to_the_next_session(notes: NotesServer) -> None:
    upstream = Upstream.from_settings(http_notes("notes", notes.url), keep_spare=False)
    async with GuardProxy([upstream], SessionRegistry()).running():
        healthy = await upstream.session_connection()
        await upstream.release(healthy)
        assert await upstream.session_connection() is healthy
        healthy.lost = True
        await upstream.release(healthy)
        fresh = await upstream.session_connection()
        assert fresh is not healthy and fresh.alive and not healthy.alive
        await upstream.release(fresh)


async def test_a_sessionless_read_does_not_ask_the_approval_store(
    notes: NotesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    cancel_pending = HeldCalls.cancel_pending

    def counted(self: HeldCalls, session_id: str, principal: str | None, reason: str) -> Any:
        asked.append(session_id.split(":")[0])
        return cancel_pending(self, session_id, principal, reason)

    monkeypatch.setattr(HeldCalls, "cancel_pending", counted)
    store = SqlApprovalStore(f"sqlite:///{tmp_path / 'approvals.db'}")
    held = HeldCalls(store, expires_after_s=3600, wait_s=0, poll_s=0.25)
    proxy = GuardProxy([Upstream.from_settings(http_notes("notes", notes.url))], SessionRegistry(held=held))
    try:
        with serving(create_app(proxy, ProxyConfig(), recorder=Recorder(AuditLog(None)))) as base:
            async with Client(f"{base}/mcp", mode="2026-07-28", cache=None) as client:
                for _ in range(3):
                    read = await Agent(client).call("get_note", {"id": "n1"})
                    assert read.meta is not None and read.meta["shadowguard/outcome"]["sessionless"] is True
                assert asked == []
                named = Agent(client, "named")
                await named.ok("get_note", {"id": "n1"})
                await named.call("rollback")
                assert asked == ["named"], "a named session's rollback still cancels what it may have left"
    finally:
        store.close()
