"""Two ``shadowguard serve`` replicas sharing Redis (proxy/replicas.py), each with its own stdio notes
upstream on one shared SQLite file, behind a round-robin client: every call of a session goes to the
replica after the one its previous call went to, so half of them land on the replica that does not
own the session and are forwarded.

* 100 sessions write two notes, read them back, and commit (three in four) or roll back: every
  session's notes are all there or none, and both replicas owned sessions.
* ``kill -9`` of one replica mid-run: its sessions are reported lost and their writes are not in the
  database (rolled back with the replica's upstream connections, never partly committed), while the
  other replica keeps serving its own sessions and new ones.

Both run in ``make slow-check`` (part of ``make test``), not in ``make pytest``.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
from mcp import Client, MCPError

from tests.support.processes import kill, shadowguard_serve
from tests.support.proxy import notes_rows, notes_upstream, request_meta, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # minutes on a loaded machine: `make slow-check`
REDIS_URL = os.environ.get("SHADOWGUARD_TEST_REDIS", "redis://127.0.0.1:6379/0")
SESSIONS = 100
HEARTBEAT_S = 2.0
RETRIES = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Replicas a and b (started one after the other: the first creates the shared database)."""
    try:
        with redis.Redis.from_url(REDIS_URL) as probe:
            probe.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is needed: {exc}")
    db = tmp_path / "notes.sqlite"
    started: dict[str, Any] = {"db": db}
    try:
        for name in ("a", "b"):
            port = _free_port()
            upstream = notes_upstream(db, f"replicas-{uuid.uuid4().hex}", writers=1, writer_wait_s=60)
            config = write_config(
                tmp_path / f"{name}.yaml",
                [upstream],
                http={"host": "127.0.0.1", "port": port},
                sessions={"store": f"sqlite:///{tmp_path / name}-sessions.db", "lease_s": 900},
                approvals={"store": f"sqlite:///{tmp_path / name}-approvals.db"},
                replicas={"redis": REDIS_URL, "url": f"http://127.0.0.1:{port}", "heartbeat_s": HEARTBEAT_S},
            )
            started[name] = shadowguard_serve(config).ready()
        yield started
    finally:
        for name in ("a", "b"):
            if name in started:
                started[name].stop()


def _retryable(outcome: Any) -> bool:
    """Whether the guard's outcome says the failure is retryable (``retryable: true`` in it)."""
    if isinstance(outcome, dict):
        return outcome.get("retryable") is True or any(_retryable(v) for v in outcome.values())
    if isinstance(outcome, list):
        return any(_retryable(v) for v in outcome)
    return False


class RoundRobin:
    """One MCP client per replica; each call goes to the next replica in turn."""

    def __init__(self, clients: list[Client]) -> None:
        self.clients = clients
        self.turn = 0

    async def call(self, session: str, tool: str, arguments: dict[str, Any]) -> Any:
        """The call's text; a retryable failure (both upstreams write one SQLite file, so a write may
        find it locked past the guard's own retries: nothing of it was kept) is sent again, as an
        agent is told to."""
        for _ in range(RETRIES):
            client = self.clients[self.turn % len(self.clients)]
            self.turn += 1
            result = await client.call_tool(
                tool, arguments, meta=request_meta({"shadowguard/session": session})
            )
            text = "\n".join(getattr(p, "text", "") for p in result.content)
            if not (result.is_error and _retryable((result.meta or {}).get("shadowguard/outcome"))):
                break
            await anyio.sleep(0.5)
        assert not result.is_error, f"{session} {tool}: {text}"
        return text


async def _session(rr: RoundRobin, i: int, commit: bool, committing: set[str] | None = None) -> str:
    """Write two notes, read them back, then commit or roll back. With ``committing`` (the sessions
    whose commit was already sent), also list the notes before deciding: a note of another session
    must never show unless that session is committing (no uncommitted or rolled-back write is seen)."""
    session = f"replica-test-{uuid.uuid4().hex[:8]}-{i}"
    for part in ("a", "b"):
        note = {"id": f"{session}-{part}", "body": f"{i} {part}", "status": "draft"}
        await rr.call(session, "put_note", note)
    for part in ("a", "b"):
        assert f"{i} {part}" in await rr.call(session, "get_note", {"id": f"{session}-{part}"})
    if committing is not None:
        listed = json.loads(await rr.call(session, "list_notes", {}))
        seen = {n["id"].rsplit("-", 1)[0] for n in listed if n["id"].startswith("replica-test-")}
        others = seen - {session}
        assert others <= committing, f"{session} sees writes of {sorted(others - committing)}"
        if commit:
            committing.add(session)
    await rr.call(session, "commit" if commit else "rollback", {})
    return session


async def test_hundred_sessions_across_two_replicas_all_or_nothing(replicas: dict[str, Any]) -> None:
    done: dict[int, str] = {}
    committing: set[str] = set()

    async def worker(indices: list[int]) -> None:
        async with (
            Client(replicas["a"].url, mode="2026-07-28", cache=None, read_timeout_seconds=120) as ca,
            Client(replicas["b"].url, mode="2026-07-28", cache=None, read_timeout_seconds=120) as cb,
        ):
            rr = RoundRobin([ca, cb] if indices[0] % 2 else [cb, ca])
            for i in indices:
                done[i] = await _session(rr, i, commit=i % 4 != 3, committing=committing)

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for w in range(4):
                tg.start_soon(worker, list(range(w, SESSIONS, 4)))
    rows = notes_rows(replicas["db"])
    for i, session in sorted(done.items()):
        present = [f"{session}-{p}" in rows for p in ("a", "b")]
        assert present == [i % 4 != 3] * 2, f"session {i}: {present}"
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as owners:
        owned = {owners.get(f"shadowguard:session-owner:meta:{s}") for s in done.values()}
    assert len(owned) == 2, f"sessions owned by {owned}: both replicas should own some"


async def test_a_killed_replica_loses_its_sessions_the_other_keeps_serving(replicas: dict[str, Any]) -> None:
    """One session on replica a is mid-run (two uncommitted writes, one of them sent through b) when a
    is killed; one session on b has only read so far. Both upstreams write one SQLite file, so a's open
    transaction holds the file's write lock until a's upstream dies with it."""
    a, b = replicas["a"], replicas["b"]
    tag = uuid.uuid4().hex[:8]
    async with (
        Client(a.url, mode="2026-07-28", cache=None, read_timeout_seconds=60) as ca,
        Client(b.url, mode="2026-07-28", cache=None, read_timeout_seconds=60) as cb,
    ):
        committed_on_a = await _session(RoundRobin([ca, cb]), 1, commit=True)
        doomed, survivor = f"doomed-{tag}", f"survivor-{tag}"
        await RoundRobin([cb]).call(survivor, "get_note", {"id": "n1"})  # b owns it
        await RoundRobin([ca]).call(doomed, "put_note", {"id": f"{doomed}-a", "body": "x"})  # a owns it
        await RoundRobin([cb]).call(doomed, "put_note", {"id": f"{doomed}-b", "body": "x"})  # forwarded

        kill(a.proc.pid)
        a.proc.wait()

        # b's session goes on and commits
        for part in ("a", "b"):
            await RoundRobin([cb]).call(survivor, "put_note", {"id": f"{survivor}-{part}", "body": "y"})
        await RoundRobin([cb]).call(survivor, "commit", {})
        # a's session, asked on b: unreachable (retry) while a's lease lasts, then lost for good
        meta = request_meta({"shadowguard/session": doomed})
        with anyio.fail_after(HEARTBEAT_S * 15):
            while True:
                try:
                    await cb.call_tool("commit", {}, meta=meta)
                except MCPError as exc:
                    if exc.error.code == -32004:  # the owner is unreachable while its lease runs: retry
                        await anyio.sleep(HEARTBEAT_S / 2)
                        continue
                    assert "is lost" in str(exc), exc
                    break
                except Exception:  # 503 while a's lease runs: the client raises a transport error
                    await anyio.sleep(HEARTBEAT_S / 2)
                    continue
                raise AssertionError("the dead replica's session committed on b")
        with pytest.raises(MCPError, match="is lost"):
            await cb.call_tool("get_note", {"id": f"{doomed}-a"}, meta=meta)
        fresh = await _session(RoundRobin([cb]), 2, commit=True)  # a new session on b works

    rows = notes_rows(replicas["db"])
    assert f"{doomed}-a" not in rows and f"{doomed}-b" not in rows
    for session in (committed_on_a, survivor, fresh):
        assert f"{session}-a" in rows and f"{session}-b" in rows, session
