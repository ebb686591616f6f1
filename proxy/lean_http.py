"""One HTTP/1.1 ``POST`` on a kept-alive plain-TCP connection, without httpx's client and pool.

Issue 18's profile of a passthrough read: the upstream ``POST`` through ``httpx2`` (client, pool,
connection, h11 events, the byte-stream wrappers) was about 40 % of the proxy's CPU for a call.
:class:`PlainHttp` sends the lean path's requests (proxy/lean_upstream.py) on keep-alive
connections of its own: the request written in one piece, the answer parsed by ``httptools`` (the
C parser uvicorn uses). It takes only what needs none of httpx's machinery (:meth:`PlainHttp.takes`):
an ``http://`` upstream, no proxy in the environment, no cookie in the client's jar, no event hook,
fewer than the pool's ``max_connections`` requests under way; anything else goes through the
``httpx2`` client as before.

What the upstream and the caller see is what the ``httpx2`` client (proxy.upstream_http) gives them:

* the client's default headers (``user-agent``, ``connection``) with ``host``, ``content-length``
  and the request's own; no ``accept-encoding``;
* an idle connection is not used after ``keepalive_expiry`` or once the upstream has closed it (it
  is readable: the same test as httpcore's), and at most ``max_keepalive`` are kept;
* an answer the upstream compressed all the same (there is no ``accept-encoding``) is decoded by
  httpx, and an event stream is split into lines by httpx (``httpx2.Response`` over this connection);
* a request is sent again, once, on another connection (the next usable idle one, else a new one)
  only when it cannot have reached the upstream (it could not be written); once written, a lost
  answer is :class:`httpx2.RemoteProtocolError` or :class:`httpx2.ReadError`, never a resend
  (proxy.upstream_http: a ``tools/call`` may have run);
* a failure to connect is :class:`httpx2.ConnectError` / :class:`httpx2.ConnectTimeout`;
* a ``set-cookie`` in an answer goes into the client's jar (and the next request takes httpx's path).

The connections are asyncio protocols (the proxy runs on asyncio: uvicorn): anyio's socket streams
re-arm the reader and yield to the loop on every send and receive, which the profile showed too.
A read timeout is the caller's (the lean path's ``asyncio.timeout`` around the whole request, which is
shorter than the client's read timeout: :meth:`takes` checks).
"""

from __future__ import annotations

import asyncio
import select
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import cast

import anyio
import httptools
import httpx2

RESENDS = 1
"""Times a request that cannot have reached the upstream is sent again (proxy.upstream_http.RESENDS)."""
_DROPPED_HEADERS = frozenset({"accept", "accept-encoding", "content-type", "host", "content-length"})


class _Connection(asyncio.Protocol):
    """One kept-alive connection, as an asyncio protocol: what the upstream sent waits in a buffer
    until :meth:`receive` takes it (anyio's socket stream re-arms the reader and yields to the loop
    on every send and receive: issue 18's profile)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self._chunks: list[bytes] = []
        self._closed = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport (uvloop's is one without subclassing asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._wake()

    def eof_received(self) -> bool:
        self._closed = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def usable(self, now: float, expiry: float) -> bool:
        """Idle for less than ``expiry``, still open and readable of nothing: an idle HTTP/1.1
        connection with something to read was closed by the upstream (or holds bytes nobody asked
        for); the socket is asked too, as httpcore asks it, for a close the loop has not seen yet."""
        if self._closed or self._chunks or now - self.idle_since >= expiry or self.transport is None:
            return False
        readable, _, _ = select.select([self.transport.get_extra_info("socket")], [], [], 0)
        return not readable

    def send(self, data: bytes) -> bool:
        """Writes ``data``; False when the connection was closed before it could be."""
        if self._closed or self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(data)
        return not self.transport.is_closing()  # a failed send closes the transport at once

    async def receive(self) -> bytes:
        """What the upstream sent since the last call; b"" once it closed the connection."""
        while not self._chunks:
            if self._closed:
                if self._error is not None:
                    raise httpx2.ReadError(str(self._error)) from self._error
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        self._chunks.clear()
        return data

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()


@dataclass
class _Answer:
    """httptools' callbacks: what has been parsed of the answer so far."""

    parser: httptools.HttpResponseParser | None = None
    status_code: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    headers_done: bool = False
    keep_alive: bool = False
    body: bytearray = field(default_factory=bytearray)
    complete: bool = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        # Asked here: once the message is complete, the parser has moved on to the next one.
        assert self.parser is not None
        self.status_code = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


def _headers(raw: list[tuple[str, str]]) -> dict[str, str]:
    """An answer's headers by lower-case name, a repeated one's values joined with ", " (what
    ``httpx2.Headers`` answers for a name), without building an ``httpx2.Headers`` per call (issue 18)."""
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


class PlainResponse:
    """An answer whose status and headers have been read; read its body with :meth:`read` or
    :meth:`iter_lines`, then :meth:`close` it (the connection is kept only if the answer was read
    whole and the upstream keeps it alive)."""

    def __init__(self, owner: PlainHttp, connection: _Connection, answer: _Answer) -> None:
        self._owner = owner
        self._connection: _Connection | None = connection
        self._answer = answer
        self.status_code = answer.status_code
        self.headers = _headers(answer.headers)
        """By lower-case name, repeated ones joined with ", " (as ``httpx2.Headers`` answers them)."""
        self._encoded = "content-encoding" in self.headers  # not asked for, but possible

    async def read(self) -> bytes:
        """The whole body (decoded by httpx, should the upstream have compressed it unasked)."""
        if self._encoded:
            return await self._as_httpx().aread()
        while await self._more():
            pass
        body = bytes(self._answer.body)
        self._answer.body.clear()
        return body

    async def iter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they arrive: ``httpx2.Response.aiter_lines`` over this connection."""
        async for line in self._as_httpx().aiter_lines():
            yield line

    def _as_httpx(self) -> httpx2.Response:
        """An ``httpx2.Response`` that streams the rest of the body from this connection, so that
        decoding, charset and line splitting are httpx's own."""
        return httpx2.Response(self.status_code, headers=self._answer.headers, stream=_Body(self))

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (what is already read first)."""
        while True:
            if self._answer.body:
                chunk = bytes(self._answer.body)
                self._answer.body.clear()
                yield chunk
            if not await self._more():
                return

    async def _more(self) -> bool:
        """Reads and parses more of the body; False once the answer is complete."""
        if self._answer.complete:
            return False
        assert self._connection is not None, "read after close"
        data = await self._connection.receive()
        if not data:
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
        _feed(self._answer, data)
        return True

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._answer.complete and self._answer.keep_alive:
            self._owner._release(connection)
        else:
            self._owner._discard(connection)


class _Body(httpx2.AsyncByteStream):
    """A :class:`PlainResponse`'s body as the byte stream of an ``httpx2.Response``."""

    def __init__(self, response: PlainResponse) -> None:
        self.response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.response.chunks():
            yield chunk


class PlainHttp:
    """Keep-alive connections to one ``http://`` origin for the lean path (see the module docstring)."""

    def __init__(
        self,
        url: httpx2.URL,
        client: httpx2.AsyncClient,
        *,
        keepalive_expiry: float,
        max_connections: int,
        max_keepalive: int,
    ) -> None:
        self.url = url
        self.client = client
        self.keepalive_expiry = keepalive_expiry
        self.max_connections = max_connections
        self.max_keepalive = max_keepalive
        self._idle: list[_Connection] = []
        self._open = 0
        self._closed = False
        self._host, self._port = url.host, url.port or 80
        proxies = urllib.request.getproxies()
        self._plain = url.scheme == "http" and not (proxies.get("http") or proxies.get("all"))
        target = url.raw_path
        defaults = b"".join(
            k.encode("latin-1") + b": " + v.encode("latin-1") + b"\r\n"
            for k, v in client.headers.items()
            if k.lower() not in _DROPPED_HEADERS
        )
        self._head = b"POST " + target + b" HTTP/1.1\r\nhost: " + url.netloc + b"\r\n" + defaults

    def takes(self, timeout: float) -> bool:
        """The request needs nothing of httpx's client: see the module docstring."""
        client = self.client
        read = client.timeout.read
        return (
            self._plain
            and not self._closed
            and self._open < self.max_connections
            and (read is None or timeout <= read)
            and not client.cookies
            and not client.event_hooks["request"]
            and not client.event_hooks["response"]
        )

    async def post(self, content: bytes, headers: dict[str, str]) -> PlainResponse:
        """Sends the request; returns once the answer's status and headers are read."""
        wire = bytearray(self._head)
        for key, value in headers.items():
            wire += key.encode("latin-1") + b": " + value.encode("latin-1") + b"\r\n"
        wire += b"content-length: " + str(len(content)).encode("ascii") + b"\r\n\r\n" + content
        request = bytes(wire)
        for attempt in range(RESENDS + 1):
            connection = await self._connection()
            if not connection.send(request):
                self._discard(connection)
                if attempt == RESENDS:
                    raise httpx2.WriteError("the connection closed before the request was written")
                continue  # not written: the upstream cannot have acted on it
            return await self._answer(connection)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _answer(self, connection: _Connection) -> PlainResponse:
        answer = _Answer()
        answer.parser = httptools.HttpResponseParser(answer)
        try:
            while not answer.headers_done:
                data = await connection.receive()
                if not data:
                    raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
                _feed(answer, data)
        except BaseException:
            self._discard(connection)
            raise
        response = PlainResponse(self, connection, answer)
        if "set-cookie" in response.headers:
            request = httpx2.Request("POST", self.url)  # the cookies one by one, not joined
            jarred = httpx2.Response(response.status_code, headers=answer.headers, request=request)
            self.client.cookies.extract_cookies(jarred)
        return response

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now, self.keepalive_expiry):
                return connection
            self._discard(connection)
        self._open += 1
        try:
            with anyio.fail_after(self.client.timeout.connect):
                _, connection = await asyncio.get_running_loop().create_connection(
                    _Connection, self._host, self._port
                )
        except TimeoutError as exc:
            self._open -= 1
            raise httpx2.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            self._open -= 1
            raise httpx2.ConnectError(str(exc)) from exc
        except BaseException:
            self._open -= 1
            raise
        return connection

    def _release(self, connection: _Connection) -> None:
        if self._closed or len(self._idle) >= self.max_keepalive:
            self._discard(connection)
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def _discard(self, connection: _Connection) -> None:
        self._open -= 1
        connection.close()

    async def aclose(self) -> None:
        """Closes the idle connections; requests under way close theirs when they end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            self._discard(connection)


def _feed(answer: _Answer, data: bytes) -> None:
    assert answer.parser is not None
    try:
        answer.parser.feed_data(data)
    except httptools.HttpParserError as exc:
        raise httpx2.RemoteProtocolError(str(exc)) from exc


__all__ = ["PlainHttp", "PlainResponse"]
