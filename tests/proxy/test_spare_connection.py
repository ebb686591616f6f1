"""A session's first call on a transactional upstream takes the upstream's spare connection
(proxy/upstreams.py ``session_connection``): a 2026-07-28 HTTP spare is handed out without a ping (its
``begin`` is its first request), any other is pinged first; and a leg whose ``begin`` finds the
upstream gone leaves the session as it was (``ProxySession._not_begun``).

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
from proxy.config import UpstreamConfig
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy
from proxy.upstream_connection import UpstreamConnection
from proxy.upstreams import Upstream
from tests.support.processes import NotesServer, notes_http
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
