"""The proxy's HTTP client for upstreams: a keep-alive pool that cannot race the servers' own, and
a resend only of what the upstream cannot have received (issue 15).

* Idle connections leave the pool after ``guard.keepalive.CLIENT_KEEPALIVE_EXPIRY_S``, before any
  server we know of closes them, so no request is sent on a connection the upstream is closing.
* Should it happen anyway (an upstream with a shorter keep-alive, or a reset), a request is sent
  again on a new connection **only** when it cannot have reached the upstream: the connection was
  not opened, or its request headers were not all written (a server acts on a request only once it
  has read its headers). A ``GET`` (safe by HTTP's rules) is also sent again while no answer has
  begun. A request whose headers went out and whose answer was lost is *not* sent again: a
  ``tools/call`` may have run, and the agent is told so (the upstream "went away").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from guard.keepalive import CLIENT_KEEPALIVE_EXPIRY_S

logger = logging.getLogger(__name__)

HEADERS_SENT = "http11.send_request_headers.complete"
ANSWER_BEGUN = "http11.receive_response_headers.complete"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RESENDS = 1
"""Times an unsent request is sent again (each on a fresh connection)."""

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]


UPSTREAM_MAX_CONNECTIONS = 100
"""Connections to one HTTP upstream at once (httpx's default pool size)."""


def upstream_http_limits() -> httpx2.Limits:
    """At most :data:`UPSTREAM_MAX_CONNECTIONS`, every one of them kept while idle, and let go after
    :data:`~guard.keepalive.CLIENT_KEEPALIVE_EXPIRY_S` idle (before any server closes it).

    httpx keeps at most 20 idle by default: with more calls than that under way at once, a
    connection was closed after nearly every burst and a new one opened for the next (issue 18: at
    32 concurrent clients a fifth of the calls opened a TCP connection to the upstream, a cost to the
    upstream as well as to the proxy). A sidecar has one upstream per pool, so what was open at the
    busiest moment is what the next moment needs; the expiry still lets go of what idles."""
    return httpx2.Limits(
        max_connections=UPSTREAM_MAX_CONNECTIONS,
        max_keepalive_connections=UPSTREAM_MAX_CONNECTIONS,
        keepalive_expiry=CLIENT_KEEPALIVE_EXPIRY_S,
    )


def never_received(method: str, events: list[str]) -> bool:
    """From the transport's trace of one failed attempt: the upstream cannot have acted on it."""
    if HEADERS_SENT not in events:
        return True
    return method in SAFE_METHODS and ANSWER_BEGUN not in events


class ResendUnsent(httpx2.AsyncBaseTransport):
    """Sends a request again when its first attempt failed before the upstream could receive it."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, *, resends: int = RESENDS) -> None:
        self.inner = inner
        self.resends = resends

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        replayable = isinstance(request.stream, httpx2.ByteStream)
        outer: Trace | None = request.extensions.get("trace")
        for attempt in range(self.resends + 1):
            events: list[str] = []
            request.extensions = {**request.extensions, "trace": _recording(events, outer)}
            try:
                return await self.inner.handle_async_request(request)
            except httpx2.TransportError as exc:
                if attempt == self.resends or not replayable or not never_received(request.method, events):
                    raise
                logger.info(
                    "resending %s %s: it never reached the upstream (%r)", request.method, request.url, exc
                )
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self.inner.aclose()


def _recording(events: list[str], outer: Trace | None) -> Trace:
    async def trace(name: str, info: dict[str, Any]) -> None:
        events.append(name)
        if outer is not None:
            await outer(name, info)

    return trace


def upstream_http_client(timeout: httpx2.Timeout) -> httpx2.AsyncClient:
    """The client the proxy hands the MCP SDK for its HTTP upstreams."""
    transport = ResendUnsent(httpx2.AsyncHTTPTransport(limits=upstream_http_limits()))
    return httpx2.AsyncClient(timeout=timeout, transport=transport)
