"""Participant leases (issue 15, docs/adr/011): a dead proxy's transaction does not live on in an
HTTP upstream. The participant rolls back a transaction no request named for its lease (here
``--tx-lease 2``) and frees the session; a live proxy renews the leases of a quiet agent's
transactions, so they do not lapse while the agent thinks.

Before the leases, a proxy killed with SIGKILL left the notes fixture's SQLite write lock held (every
other writer failed with ``database is locked``) and the PostgreSQL env server held the session's
pooled schema until its 30-minute idle timeout.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.support.processes import RETAIL_SERVE, NotesServer, Process, kill, shadowguard_serve
from tests.support.proxy import (
    MODERN,
    agent_on,
    direct_write,
    notes_http_upstream,
    notes_rows,
    retail_http_upstream,
    write_config,
)
from tests.support.services import require_postgres

pytestmark = pytest.mark.anyio
LEASE_S = 2.0
WAIT_S = LEASE_S + 30.0
"""How long a test waits for the lease to lapse: the lease, plus a generous bound for a loaded machine."""
PG_URL = os.environ.get("SHADOWGUARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[NotesServer]:
    process = NotesServer(tmp_path / "notes.sqlite", "--tx-lease", str(LEASE_S)).ready()
    yield process
    process.stop()


def proxy_for(tmp: Path, upstream: dict[str, Any]) -> Process:
    config = write_config(
        tmp / "proxy.yaml",
        [upstream],
        http={"host": "127.0.0.1", "port": 0},
        sessions={"store": f"sqlite:///{tmp / 'sessions.db'}"},
    )
    return shadowguard_serve(config).ready()


@pytest.fixture
def proxy(tmp_path: Path, notes: NotesServer) -> Iterator[Process]:
    """``shadowguard serve`` on the notes fixture, its sessions in SQLite; stopped afterwards (a test may
    stop or kill it first)."""
    process = proxy_for(tmp_path, notes_http_upstream(notes.url))
    yield process
    process.stop()


def kill_and_wait(process: Any) -> None:
    kill(process.proc.pid)
    process.proc.wait(timeout=60)


async def test_a_killed_proxys_transaction_is_rolled_back_when_its_lease_lapses(
    proxy: Process, notes: NotesServer
) -> None:
    note = f"lease-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, MODERN) as agent:
        await agent.ok("put_note", {"id": note, "body": "never committed", "status": "draft"})
        assert direct_write(notes.db, timeout=0.2) == "database is locked", "the session holds the write lock"
    kill_and_wait(proxy)
    deadline = time.monotonic() + WAIT_S
    while (error := direct_write(notes.db, timeout=0.2)) is not None and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert error is None, f"still locked {WAIT_S:.0f} s after the kill: {error}"
    assert note not in notes_rows(notes.db), "rolled back, not committed"


async def test_a_quiet_agents_transaction_outlives_the_lease(proxy: Process, notes: NotesServer) -> None:
    """The proxy renews the lease while the agent sends nothing for several leases."""
    note = f"quiet-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, MODERN) as agent:
        await agent.ok("put_note", {"id": note, "body": "thought about", "status": "draft"})
        await anyio.sleep(LEASE_S * 3)
        await agent.ok("commit")
    assert notes_rows(notes.db)[note]["body"] == "thought about"
    assert proxy.stop() == 0, proxy.log.read_text()


async def test_the_postgresql_env_server_frees_a_killed_proxys_session(tmp_path: Path, bench: Any) -> None:
    """The env server closes the lapsed session's environment, so its pooled schema goes back."""
    require_postgres()
    env = Process(
        [
            *RETAIL_SERVE,
            "--port",
            "0",
            "--data",
            str(bench.tasks_root),
            "--db",
            PG_URL,
            "--tx-lease",
            str(LEASE_S),
        ],
        tmp_path / "retail.log",
        announce="env serve: listening on",
    ).ready()
    proxy = proxy_for(tmp_path, retail_http_upstream(env.url))
    try:
        async with agent_on(proxy.url, MODERN) as agent:
            await agent.ok(
                "zendesk_update_item", {"table": "tickets", "id": "1", "item": {"description": "pending"}}
            )
        async with httpx2.AsyncClient(base_url=env.base, timeout=30) as http:
            assert (await http.get("/healthz")).json()["sessions"] == 1
            kill_and_wait(proxy)
            deadline = time.monotonic() + WAIT_S
            while (
                sessions := (await http.get("/healthz")).json()["sessions"]
            ) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
        assert sessions == 0, "the lapsed session's environment (and its pooled schema) is still held"
    finally:
        proxy.stop()
        env.stop()
