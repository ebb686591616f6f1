"""Two ``shadowguard serve`` replicas sharing Redis (proxy/replicas.py), each with its own stdio notes
upstream on one shared SQLite file, behind a round-robin client: every call of a session goes to the
replica after the one its previous call went to, so half of them land on the replica that does not
own the session and are forwarded.

* 100 sessions write two notes, read them back, and commit (three in four) or roll back: every
  session's notes are all there or none, and both replicas owned sessions.
* ``kill -9`` of one replica mid-run: its sessions are reported lost and their writes are not in the
  database (rolled back with the replica's upstream connections, never partly committed), while the
  other replica keeps serving its own sessions and new ones; the sessions API on the other replica
  says 503 with ``Retry-After`` while the dead one's lease runs, then 410 lost.
* The sessions API (``/api/sessions/{id}``, ``/commit``, ``/rollback``) asked on the replica that does
  not own the session is answered by the owner; an owner alive by its lease that does not answer
  gives 503 with ``Retry-After``, a dead owner's session 410 lost, as ``/mcp`` says.
* With agent tokens: two agents using one session id on different replicas keep a session each, on
  its own replica; the API reaches each through the other replica with the caller's token.

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
import httpx2
import mcp.types as types
import pytest
import redis
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from proxy.approvals.auth import hash_token
from tests.support.processes import kill, shadowguard_serve
from tests.support.proxy import notes_rows, notes_upstream, request_meta, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # minutes on a loaded machine: `make slow-check`
REDIS_URL = os.environ.get("SHADOWGUARD_TEST_REDIS", "redis://127.0.0.1:6379/0")
SESSIONS = 100
HEARTBEAT_S = 2.0
RETRIES = 20
TOKENS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("alice", "bob", "ops")}
AUTH = {
    "agents": [{"name": n, "token_sha256": hash_token(TOKENS[n])} for n in ("alice", "bob")],
    "orchestrators": [{"name": "ops", "token_sha256": hash_token(TOKENS["ops"])}],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Replicas a and b (started one after the other: the first creates the shared database)."""
    yield from _replicas(tmp_path)


@pytest.fixture
def replicas_with_auth(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Replicas a and b with agent tokens (alice, bob) and an orchestrator's (ops)."""
    yield from _replicas(tmp_path, auth=AUTH)


def _replicas(tmp_path: Path, **sections: Any) -> Iterator[dict[str, Any]]:
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
                **sections,
            )
            started[name] = shadowguard_serve(config).ready()
        yield started
    finally:
        for name in ("a", "b"):
            if name in started:
                started[name].stop()


def _meta(session: str) -> types.RequestParamsMeta:
    """A request's ``_meta`` naming the guard session."""
    return request_meta({"shadowguard/session": session})


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
        owned = {owners.get(f"shadowguard:session-owner:meta:/{s}") for s in done.values()}
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
        doomed, survivor, doomed_api = f"doomed-{tag}", f"survivor-{tag}", f"doomed-api-{tag}"
        await RoundRobin([cb]).call(survivor, "get_note", {"id": "n1"})  # b owns it
        await RoundRobin([ca]).call(doomed, "put_note", {"id": f"{doomed}-a", "body": "x"})  # a owns it
        await RoundRobin([cb]).call(doomed, "put_note", {"id": f"{doomed}-b", "body": "x"})  # forwarded
        await RoundRobin([ca]).call(doomed_api, "get_note", {"id": "n1"})  # a owns it, nothing written

        kill(a.proc.pid)
        a.proc.wait()
        await _api_commit_until_lost(b.base, doomed_api)

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


async def _api_commit_until_lost(base: str, session: str) -> None:
    """``POST /api/sessions/{session}/commit`` on a replica that does not own it, whose owner was
    killed: 503 with ``Retry-After`` while the owner's lease runs, then 410 lost (never a commit)."""
    async with httpx2.AsyncClient(base_url=base, timeout=60) as api:
        with anyio.fail_after(HEARTBEAT_S * 15):
            while True:
                answer = await api.post(f"/api/sessions/{session}/commit")
                if answer.status_code != 503:
                    break
                assert answer.headers["retry-after"] == str(int(HEARTBEAT_S)), answer.headers
                assert answer.json()["error"]["code"] == "unavailable", answer.text
                await anyio.sleep(HEARTBEAT_S / 2)
    assert answer.status_code == 410, answer.text
    assert answer.json()["error"]["code"] == "lost"
    assert f"session {session!r} is lost" in answer.json()["error"]["message"]


async def test_the_sessions_api_on_the_replica_that_does_not_own_the_session(
    replicas: dict[str, Any],
) -> None:
    """Sessions written through a (one after the other: both upstreams write one SQLite file, so an
    open write transaction holds it); b's sessions API shows and commits the first, rolls back the
    second."""
    a, b = replicas["a"], replicas["b"]
    tag = uuid.uuid4().hex[:8]
    kept, dropped = f"api-kept-{tag}", f"api-dropped-{tag}"
    async with (
        Client(a.url, mode="2026-07-28", cache=None, read_timeout_seconds=60) as ca,
        httpx2.AsyncClient(base_url=b.base, timeout=60) as on_b,
        httpx2.AsyncClient(base_url=a.base, timeout=60) as on_a,
    ):
        await RoundRobin([ca]).call(kept, "put_note", {"id": f"{kept}-a", "body": "z"})
        shown = await on_b.get(f"/api/sessions/{kept}")
        assert shown.status_code == 200, shown.text
        assert shown.json()["id"] == kept and shown.json()["calls"] == 1, shown.json()
        listed = (await on_b.get("/api/sessions")).json()
        assert listed["replica"]["url"] == b.base, listed
        assert kept not in {s["id"] for s in listed["sessions"]}, "b lists only its own sessions"
        assert kept in {s["id"] for s in (await on_a.get("/api/sessions")).json()["sessions"]}
        committed = await on_b.post(f"/api/sessions/{kept}/commit")
        assert committed.status_code == 200, committed.text
        assert committed.json()["committed"] is True and committed.json()["changes"] == 1

        await RoundRobin([ca]).call(dropped, "put_note", {"id": f"{dropped}-a", "body": "z"})
        rolled = await on_b.post(f"/api/sessions/{dropped}/rollback")
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["rolled_back"] is True and rolled.json()["changes"] == 1

        unknown = await on_b.post(f"/api/sessions/nobody-{tag}/commit")
        assert unknown.status_code == 404, unknown.text
    rows = notes_rows(replicas["db"])
    assert f"{kept}-a" in rows and f"{dropped}-a" not in rows


async def test_the_sessions_api_when_the_owner_is_silent_or_dead(replicas: dict[str, Any]) -> None:
    """Directory entries of a replica alive by its lease but listening nowhere, and of one whose lease
    is gone: b answers 503 with Retry-After for the first, 410 lost for the second (and ``/mcp``
    says lost too)."""
    b = replicas["b"]
    tag = uuid.uuid4().hex[:8]
    silent, gone, ghost = f"api-silent-{tag}", f"api-gone-{tag}", f"ghost-{tag}"
    keys = [f"shadowguard:replica:{ghost}"]
    keys += [f"shadowguard:session-owner:meta:/{s}" for s in (silent, gone)]
    keys += [f"shadowguard:session-principals:{s}" for s in (silent, gone)]
    with redis.Redis.from_url(REDIS_URL) as directory:
        directory.set(keys[0], f"http://127.0.0.1:{_free_port()}", px=120_000)
        for session, owner in ((silent, ghost), (gone, f"dead-{tag}")):
            directory.set(f"shadowguard:session-owner:meta:/{session}", owner, px=120_000)
            directory.sadd(f"shadowguard:session-principals:{session}", "")  # no agent auth: no principal
    try:
        async with httpx2.AsyncClient(base_url=b.base, timeout=60) as api:
            for path in (f"/api/sessions/{silent}", f"/api/sessions/{silent}/commit"):
                answer = await api.request("GET" if path.endswith(silent) else "POST", path)
                assert answer.status_code == 503, answer.text
                assert answer.headers["retry-after"] == str(int(HEARTBEAT_S))
                assert "is unreachable" in answer.json()["error"]["message"]
            for method, path in (("GET", ""), ("POST", "/commit"), ("POST", "/rollback")):
                answer = await api.request(method, f"/api/sessions/{gone}{path}")
                assert answer.status_code == 410, answer.text
                assert answer.json()["error"]["code"] == "lost"
                assert f"session {gone!r} is lost" in answer.json()["error"]["message"]
        async with Client(b.url, mode="2026-07-28", cache=None, read_timeout_seconds=60) as cb:
            with pytest.raises(MCPError, match="is lost"):
                await cb.call_tool("commit", {}, meta=_meta(gone))
    finally:
        with redis.Redis.from_url(REDIS_URL) as directory:
            directory.delete(*keys)


def _bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


async def _read_as(who: str, url: str, session: str) -> None:
    """``who`` reads a note through ``url`` in its session ``session`` (it opens the session there)."""
    async with (
        httpx2.AsyncClient(headers=_bearer(who), timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None) as agent,
    ):
        result = await agent.call_tool("get_note", {"id": "n1"}, meta=_meta(session))
    assert result.meta is not None and result.meta["shadowguard/outcome"]["session"] == session


async def test_two_agents_with_one_session_id_across_replicas(replicas_with_auth: dict[str, Any]) -> None:
    """alice's session S opens on a, bob's S on b: each stays on its replica (bob's is not sent to
    alice's), and the sessions API reaches each through the other replica with the caller's token."""
    a, b = replicas_with_auth["a"], replicas_with_auth["b"]
    shared, solo = f"shared-{uuid.uuid4().hex[:8]}", f"solo-{uuid.uuid4().hex[:8]}"
    await _read_as("alice", a.url, shared)
    await _read_as("alice", a.url, solo)
    await _read_as("bob", b.url, shared)
    async with httpx2.AsyncClient(timeout=60) as api:
        ids = {
            name: (await api.get(f"{r.base}/api/sessions", headers=_bearer("ops"))).json()["replica"]["id"]
            for name, r in (("a", a), ("b", b))
        }
        with redis.Redis.from_url(REDIS_URL, decode_responses=True) as directory:
            assert directory.get(f"shadowguard:session-owner:meta:alice/{shared}") == ids["a"]
            assert directory.get(f"shadowguard:session-owner:meta:bob/{shared}") == ids["b"]

        as_alice = await api.get(f"{b.base}/api/sessions/{shared}", headers=_bearer("alice"))
        assert as_alice.status_code == 200 and as_alice.json()["principal"] == "alice", as_alice.text
        bob_by_ops = await api.get(f"{a.base}/api/sessions/{shared}?principal=bob", headers=_bearer("ops"))
        assert bob_by_ops.status_code == 200 and bob_by_ops.json()["principal"] == "bob", bob_by_ops.text
        nobody = await api.post(f"{a.base}/api/sessions/{shared}/commit")
        assert nobody.status_code == 401, nobody.text

        bob_rolled = await api.post(f"{a.base}/api/sessions/{shared}/rollback", headers=_bearer("bob"))
        assert bob_rolled.status_code == 200 and bob_rolled.json()["rolled_back"] is True, bob_rolled.text
        alice_by_ops = await api.post(
            f"{b.base}/api/sessions/{shared}/commit?principal=alice", headers=_bearer("ops")
        )
        assert alice_by_ops.status_code == 200, alice_by_ops.text
        assert alice_by_ops.json()["committed"] is True
        # an id only alice's session on a holds, named alone by an orchestrator on b: found by the index
        solo_by_ops = await api.get(f"{b.base}/api/sessions/{solo}", headers=_bearer("ops"))
        assert solo_by_ops.status_code == 200 and solo_by_ops.json()["principal"] == "alice", solo_by_ops.text
        bob_on_solo = await api.get(f"{a.base}/api/sessions/{solo}", headers=_bearer("bob"))
        assert bob_on_solo.status_code == 404, "another agent's session is not found, wherever it is asked"
