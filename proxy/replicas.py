"""Several proxy replicas behind one address: each guard session lives on one replica.

A session's shadow transactions are connections and locks inside one process, so they cannot move.
With ``replicas.redis`` set, every replica records in Redis

* that it is alive: ``shadowguard:replica:<id>`` = its URL, with a lease of ``replicas.heartbeat_s``
  renewed every third of it (a replica killed with ``kill -9`` stops renewing);
* which sessions it owns: ``shadowguard:session-owner:<key>`` = its id, claimed by the first replica a
  session's request reaches (``SET NX``), with the lease of ``sessions.lease_s``, renewed by every
  request of the session.

A ``/mcp`` request is placed by its session key (the ``Mcp-Session-Id`` header, else the body's
``_meta["shadowguard/session"]``): on this replica if it owns the session (or claims it now); else
**forwarded** to the owner's URL (request and streamed response relayed as they are, marked
``X-Shadowguard-Forwarded`` so that it is never forwarded twice). When the owner is gone (its alive key
expired), its open sessions died with it: their upstream connections closed, so their uncommitted
work was rolled back, never partly committed. The session is marked lost (for ``LOST_TTL_S``) and
every later request of it is answered with a JSON-RPC error saying so, so that a ``commit`` on another
replica can never commit the part of a session done after the crash. While the owner is still within
its lease but unreachable, the answer is a retryable error. Requests that name no session (discovery,
``tools/list``) are served where they land.

Errors: Redis unreachable -> HTTP 503 with a JSON-RPC error (fail closed: a call is never run on a
replica that could not check it owns the session). Approvals already live in the shared approval
store (``approvals.store: redis://...``) and are decided from any replica. The sessions API
(``/api/sessions/{id}...``) is placed by the same keys, without claiming: proxy/replica_api.py.

**Owner keys and principals.** Guard sessions are keyed by (principal, id) (ADR 011), and so is a
``_meta`` session's owner key: ``meta:<principal, percent-encoded>/<id>`` (the principal the agent
token names, empty without agent auth; encoded, so no principal can end inside another's key). Two
agents that pick the same id are two sessions: each is claimed, renewed and, when its replica dies,
marked lost on its own; one agent's lost id never refuses the other's fresh session, and one cannot
pin the other's sessions to its replica. The ids each principal used are indexed in
``shadowguard:session-principals:<id>`` (a set of encoded principals, kept while a lease or a lost
mark can last) for an orchestrator that names a session by id alone. An ``Mcp-Session-Id`` key
(``http:<id>``) stays principal-free on purpose: the SDK keeps that HTTP session in the process that
minted it, whoever sends the header, so every request carrying it must reach that process (another
agent's use of it is refused there by the SDK, which binds the id to the agent that opened it).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

import anyio
import httpx2
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.config import ProxyConfig
from proxy.server import principal_of_scope

logger = logging.getLogger(__name__)

FORWARDED_HEADER = "x-shadowguard-forwarded"
SESSION_META_KEY = "shadowguard/session"
LOST_TTL_S = 3600
SESSION_LOST = -32003
"""JSON-RPC error code: the session's replica died; its uncommitted work was rolled back."""
REPLICA_UNAVAILABLE = -32004
"""JSON-RPC error code: the session's replica or the replica directory cannot be reached now (retry)."""

_ALIVE = "shadowguard:replica:"
_OWNER = "shadowguard:session-owner:"
_PRINCIPALS = "shadowguard:session-principals:"
_MARK_LOST = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return false
"""
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


@dataclass(frozen=True)
class SessionKey:
    """What a session is placed by: its ``Mcp-Session-Id`` (``era="http"``), else its ``_meta`` id
    together with the principal it runs under (see the module docstring)."""

    id: str
    principal: str | None = None
    era: Literal["http", "meta"] = "meta"

    @property
    def name(self) -> str:
        """The owner key's suffix in Redis."""
        if self.era == "http":
            return f"http:{self.id}"
        return f"meta:{quote(self.principal or '', safe='')}/{self.id}"


@dataclass(frozen=True)
class Placement:
    """Where a session's request is served."""

    where: Literal["here", "forward", "lost", "unreachable"]
    owner: str | None = None
    url: str | None = None


class ReplicaDirectory:
    """This replica's entry in Redis and the session owners there."""

    def __init__(self, redis_url: str, url: str, *, heartbeat_s: float, session_lease_s: float) -> None:
        self.replica_id = uuid.uuid4().hex
        self.url = url.rstrip("/")
        self.heartbeat_s = heartbeat_s
        self.session_lease_ms = int(session_lease_s * 1000)
        self._redis = aioredis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
        self._mark_lost = self._redis.register_script(_MARK_LOST)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ReplicaDirectory]:
        """Alive while inside (the first heartbeat is written before it yields: Redis must answer)."""
        await self._beat()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._heartbeats)
            try:
                yield self
            finally:
                tasks.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self._redis.delete(_ALIVE + self.replica_id)
                    await self._redis.aclose()

    async def _beat(self) -> None:
        await self._redis.set(_ALIVE + self.replica_id, self.url, px=int(self.heartbeat_s * 1000))

    async def _heartbeats(self) -> None:
        while True:
            await anyio.sleep(self.heartbeat_s / 3)
            try:
                await self._beat()
            except RedisError as exc:  # the next beat retries; the lease covers two misses
                logger.error("replica heartbeat failed: %s", exc)

    async def place(self, key: SessionKey) -> Placement:
        """Claim ``key`` for this replica, or say where it lives (raises RedisError)."""
        if await self._redis.set(_OWNER + key.name, self.replica_id, nx=True, px=self.session_lease_ms):
            await self._renew(key, owner_key=False)
            return Placement("here", self.replica_id, self.url)
        placement = await self.locate(key)
        if placement is None:  # expired between the two calls
            return await self.place(key)
        if placement.where == "here":
            await self._renew(key, owner_key=True)
        return placement

    async def locate(self, key: SessionKey) -> Placement | None:
        """Where ``key`` lives, without claiming it: None when no replica owns it. An owner whose
        alive key has expired is dead: the session is marked lost here (raises RedisError)."""
        owner_key = _OWNER + key.name
        owner = _text(await self._redis.get(owner_key))
        if owner is None:
            return None
        if owner.startswith("lost:"):
            return Placement("lost", owner.removeprefix("lost:"))
        if owner == self.replica_id:
            return Placement("here", owner, self.url)
        url = _text(await self._redis.get(_ALIVE + owner))
        if url is not None:
            return Placement("forward", owner, url)
        await self._mark_lost(keys=[owner_key], args=[owner, f"lost:{owner}", LOST_TTL_S * 1000])
        return Placement("lost", owner)

    async def principals(self, session_id: str) -> list[str | None]:
        """The principals whose ``_meta`` sessions used ``session_id`` lately (None: no agent auth)."""
        members = await self._redis.smembers(_PRINCIPALS + session_id)
        return sorted((unquote(m) or None for m in members), key=lambda p: p or "")

    async def _renew(self, key: SessionKey, *, owner_key: bool) -> None:
        """Extend the owner key's lease (``owner_key``) and keep a ``_meta`` id's principal indexed."""
        if not owner_key and key.era != "meta":
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            if owner_key:
                pipe.pexpire(_OWNER + key.name, self.session_lease_ms)
            if key.era == "meta":
                index = _PRINCIPALS + key.id
                pipe.sadd(index, quote(key.principal or "", safe=""))
                pipe.pexpire(index, self.session_lease_ms + LOST_TTL_S * 1000)
            await pipe.execute()


def lost_message(session_id: str, owner: str | None) -> str:
    """What a request of a lost session is told (over ``/mcp`` and the sessions API alike)."""
    return (
        f"session {session_id!r} is lost: its replica ({owner}) stopped; its uncommitted changes were "
        "rolled back with it. Start a new session."
    )


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def replica_directory(config: ProxyConfig) -> ReplicaDirectory | None:
    """This replica's directory ``config.replicas`` describes, or None with one replica."""
    replicas = config.replicas
    if replicas.redis is None or replicas.url is None:
        return None
    return ReplicaDirectory(
        replicas.redis,
        replicas.url,
        heartbeat_s=replicas.heartbeat_s,
        session_lease_s=config.sessions.lease_s,
    )


def session_key(scope: Scope, body: bytes) -> SessionKey | None:
    """The key a request is placed by: its ``Mcp-Session-Id`` (the SDK keeps that session in the
    process that minted it), else ``_meta["shadowguard/session"]`` of a JSON-RPC request body with
    the request's authenticated principal."""
    header = Headers(scope=scope).get("mcp-session-id")
    if header:
        return SessionKey(header, era="http")
    try:
        message = json.loads(body) if body else None
    except ValueError:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(value, str) or not value:
        return None
    return SessionKey(value, principal_of_scope(scope))


class ReplicaRouter:
    """ASGI middleware in front of ``/mcp``: serves, forwards or refuses each request by its session."""

    def __init__(self, app: ASGIApp, directory: ReplicaDirectory, *, max_body_bytes: int) -> None:
        self.app = app
        self.directory = directory
        self.max_body_bytes = max_body_bytes
        self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(10.0, read=None))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive, self.max_body_bytes)
        replay = _replaying(body, receive, complete)
        key = session_key(scope, body) if complete else None
        if key is None:
            await self.app(scope, replay, self._claiming_new_sessions(send))
            return
        try:
            placement = await self.directory.place(key)
        except RedisError as exc:
            await _rpc_error(
                send, body, 503, REPLICA_UNAVAILABLE, f"the replica directory is unreachable: {exc}"
            )
            return
        forwarded = Headers(scope=scope).get(FORWARDED_HEADER)
        if placement.where == "here":
            await self.app(scope, replay, send)
        elif placement.where == "lost":
            await _rpc_error(
                send,
                body,
                200,
                SESSION_LOST,
                lost_message(key.id, placement.owner),
            )
        elif forwarded:
            await _rpc_error(
                send,
                body,
                503,
                REPLICA_UNAVAILABLE,
                "a forwarded request reached a replica that does not own it",
            )
        else:
            assert placement.url is not None
            await self._forward(scope, body, send, placement.url)

    def _claiming_new_sessions(self, send: Send) -> Send:
        """A handshake-era ``initialize`` answered here mints an ``Mcp-Session-Id``: claim it."""

        async def claiming(message: Message) -> None:
            if message["type"] == "http.response.start":
                minted = Headers(raw=message.get("headers", [])).get("mcp-session-id")
                if minted:
                    await self.directory.place(SessionKey(minted, era="http"))
            await send(message)

        return claiming

    async def _forward(self, scope: Scope, body: bytes, send: Send, owner_url: str) -> None:
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.decode("latin-1").lower() not in HOP_HEADERS
        ]
        headers.append((FORWARDED_HEADER, self.directory.replica_id))
        query = scope.get("query_string", b"").decode("latin-1")
        url = owner_url + scope["path"] + (f"?{query}" if query else "")
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.TransportError as exc:
            await _rpc_error(
                send,
                body,
                503,
                REPLICA_UNAVAILABLE,
                f"the session's replica {owner_url} is unreachable: {exc}",
            )
            return
        try:
            out = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in response.headers.multi_items()
                if k.lower() not in HOP_HEADERS
            ]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body, up to ``limit`` + 1 bytes (the app answers 413 above it); complete or not."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > limit:
            return b"".join(chunks), False


def _replaying(body: bytes, receive: Receive, complete: bool) -> Receive:
    """A receive that gives ``body`` back first (whole, or as read so far), then the rest."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


def _request_id(body: bytes) -> Any:
    """The JSON-RPC id of ``body``; None (JSON-RPC's null id) when the body is not a request object."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return None
    return parsed.get("id") if isinstance(parsed, dict) else None


async def _rpc_error(send: Send, body: bytes, status: int, code: int, message: str) -> None:
    payload = {"jsonrpc": "2.0", "id": _request_id(body), "error": {"code": code, "message": message}}
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
