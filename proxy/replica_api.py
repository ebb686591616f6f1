"""The sessions API across replicas: ``/api/sessions/{id}``, ``.../commit`` and ``.../rollback``
reaching a replica that does not hold the session are answered by the replica that does.

A session lives on one replica (proxy/replicas.py). When the replica a sessions API request lands on
holds no open session of that id the caller may see, it looks the id up in the replica directory,
without claiming it (an orchestrator's status poll or commit must not make a replica the owner):

* the owner is another live replica -> the request is **forwarded** there (method, path, query,
  headers with the caller's ``Authorization``, body) and the owner's answer returned as it is,
  whatever its status; it is marked ``X-Shadowguard-Forwarded``, so never forwarded twice (the
  owner answers from what it holds, a 404 if the session just ended);
* the owner's alive key has expired -> the session is **lost** (its uncommitted work died with the
  replica): HTTP 410, code ``lost``, with the message ``/mcp`` gives as JSON-RPC ``-32003``;
* the owner is alive by its lease but does not answer, or Redis cannot be reached -> HTTP 503, code
  ``unavailable``, ``Retry-After`` of one heartbeat lease (by then the owner has answered again or
  its sessions are reported lost) — ``/mcp``'s ``-32004``;
* several principals' sessions of that id live on different replicas (an orchestrator that named no
  ``?principal=``) -> 409 ``conflict``, as one replica answers for its own sessions;
* no replica owns it -> this replica answers (404, or what its session ledger holds).

Which principals to look up: an agent's own name; an orchestrator's ``?principal=``; else every
principal indexed for the id (:meth:`ReplicaDirectory.principals`), plus the ``Mcp-Session-Id`` key.
A session held here is answered here without asking Redis. ``GET /api/sessions`` (the list) is not
forwarded: it lists this replica's open sessions and names the replica (``"replica": {"id",
"url"}``) so that a caller knows which one it saw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import httpx2
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from proxy.approvals.api import error_response
from proxy.replicas import (
    FORWARDED_HEADER,
    HOP_HEADERS,
    Placement,
    ReplicaDirectory,
    SessionKey,
    lost_message,
)

_DECODED = {"content-encoding"}  # the owner's body is read decoded, so it is sent on unencoded


@dataclass(frozen=True)
class ApiPlacement:
    """Where a sessions API request for one id is answered."""

    where: Literal["here", "forward", "lost", "conflict"]
    url: str | None = None
    owner: str | None = None


def decide(placements: Sequence[Placement], *, forwarded: bool) -> ApiPlacement:
    """The answer for a request that this replica cannot serve from its own open sessions, given
    where the directory places each candidate key of the id (None: no replica owns that key)."""
    if forwarded:
        return ApiPlacement("here")
    elsewhere = [p for p in placements if p.where in ("forward", "lost")]
    if not elsewhere:
        return ApiPlacement("here")
    urls = {p.url for p in elsewhere}
    if len(elsewhere) > 1 and (len(urls) > 1 or None in urls):
        return ApiPlacement("conflict")
    first = elsewhere[0]
    if first.where == "lost":
        return ApiPlacement("lost", owner=first.owner)
    return ApiPlacement("forward", url=first.url, owner=first.owner)


class ReplicaSessions:
    """Answers the sessions API requests of sessions this replica does not hold."""

    def __init__(self, directory: ReplicaDirectory) -> None:
        self.directory = directory
        self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(10.0, read=None))

    def describe(self) -> dict[str, str]:
        """This replica, as the session list names it."""
        return {"id": self.directory.replica_id, "url": self.directory.url}

    async def answer(
        self, request: Request, session_id: str, principals: Sequence[str | None] | None
    ) -> Response | None:
        """The answer for ``session_id`` from its owner (or why there is none); None when this replica
        should answer itself. ``principals``: the ones to look up, None for every indexed one."""
        forwarded = request.headers.get(FORWARDED_HEADER) is not None
        if forwarded:
            return None
        try:
            placements = await self._placements(session_id, principals)
        except RedisError as exc:
            return self._unavailable(f"the replica directory is unreachable: {exc}")
        decided = decide(placements, forwarded=forwarded)
        if decided.where == "here":
            return None
        if decided.where == "lost":
            return error_response(410, "lost", lost_message(session_id, decided.owner))
        if decided.where == "conflict":
            return error_response(
                409,
                "conflict",
                f"sessions of several principals with the id {session_id!r} live on different "
                "replicas; name one with ?principal=",
            )
        assert decided.url is not None
        return await self._forward(request, decided.url)

    async def _placements(self, session_id: str, principals: Sequence[str | None] | None) -> list[Placement]:
        keys = [SessionKey(session_id, era="http")]
        who = await self.directory.principals(session_id) if principals is None else principals
        keys += [SessionKey(session_id, principal) for principal in who]
        found = [await self.directory.locate(key) for key in keys]
        return [p for p in found if p is not None]

    async def _forward(self, request: Request, owner_url: str) -> Response:
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
        headers.append((FORWARDED_HEADER, self.directory.replica_id))
        query = request.url.query
        url = owner_url + request.url.path + (f"?{query}" if query else "")
        try:
            answer = await self._client.request(
                request.method, url, headers=headers, content=await request.body()
            )
        except httpx2.TransportError as exc:
            return self._unavailable(
                f"the session's replica {owner_url} is unreachable: {exc}. If the request was sent, "
                "its outcome is unknown until then: GET the session to see"
            )
        response = Response(content=answer.content, status_code=answer.status_code)
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in answer.headers.multi_items()
            if k.lower() not in HOP_HEADERS | _DECODED
        ] + [(b"content-length", str(len(answer.content)).encode())]
        return response

    def _unavailable(self, message: str) -> Response:
        retry_after = str(math.ceil(self.directory.heartbeat_s))
        return error_response(
            503,
            "unavailable",
            f"{message}; retry after {retry_after} s",
            headers={"Retry-After": retry_after},
        )

    async def aclose(self) -> None:
        await self._client.aclose()
