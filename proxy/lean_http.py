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
* an answer the upstream compressed all the same (there is no ``accept-encoding``) is decoded with
  httpx's own decoders;
* a request is sent again, once, on a new connection only when it cannot have reached the upstream
  (it could not be written); once written, a lost answer is :class:`httpx2.RemoteProtocolError` or
  :class:`httpx2.ReadError`, never a resend (proxy.upstream_http: a ``tools/call`` may have run);
* a failure to connect is :class:`httpx2.ConnectError` / :class:`httpx2.ConnectTimeout`;
* a ``set-cookie`` in an answer goes into the client's jar (and the next request takes httpx's path).

A read timeout is the caller's (the lean path's ``fail_after`` around the whole request, which is
shorter than the client's read timeout: :meth:`takes` checks).
"""

from __future__ import annotations

import select
import socket
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import anyio.abc
import httptools
import httpx2
from httpx2._decoders import ContentDecoder, LineDecoder, TextDecoder

READ_SIZE = 65536
RESENDS = 1
"""Times a request that cannot have reached the upstream is sent again (proxy.upstream_http.RESENDS)."""
_DROPPED_HEADERS = frozenset({"accept", "accept-encoding", "content-type", "host", "content-length"})


@dataclass
class _Connection:
    stream: anyio.abc.SocketStream
    sock: socket.socket
    idle_since: float = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        """Idle for less than ``expiry`` and not readable: an idle HTTP/1.1 connection that is
        readable was closed by the upstream (or holds bytes nobody asked for)."""
        if now - self.idle_since >= expiry:
            return False
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not readable


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


class PlainResponse:
    """An answer whose status and headers have been read; read its body with :meth:`read` or
    :meth:`iter_lines`, then :meth:`close` it (the connection is kept only if the answer was read
    whole and the upstream keeps it alive)."""

    def __init__(self, owner: PlainHttp, connection: _Connection, answer: _Answer) -> None:
        self._owner = owner
        self._connection: _Connection | None = connection
        self._answer = answer
        self.status_code = answer.status_code
        self.headers = httpx2.Headers(answer.headers)
        self._decoder: ContentDecoder | None = None
        if "content-encoding" in self.headers:
            # Not asked for (no accept-encoding), but decoded as httpx would decode it.
            self._decoder = self._response()._get_content_decoder()

    async def read(self) -> bytes:
        """The whole body (decoded as httpx decodes it, should the upstream have compressed it)."""
        while await self._more():
            pass
        body = bytes(self._answer.body)
        self._answer.body.clear()
        if self._decoder is None:
            return body
        return b"".join(self._decoder.decode(body)) + b"".join(self._decoder.flush())

    async def iter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they arrive, decoded and split as ``httpx2.Response.aiter_lines``."""
        text = TextDecoder(encoding=self._response().encoding or "utf-8")
        lines = LineDecoder()
        while True:
            if self._answer.body:
                chunk = bytes(self._answer.body)
                self._answer.body.clear()
                if self._decoder is not None:
                    chunk = b"".join(self._decoder.decode(chunk))
                for line in lines.decode(text.decode(chunk)):
                    yield line
            if not await self._more():
                break
        tail = b"".join(self._decoder.flush()) if self._decoder is not None else b""
        rest = text.decode(tail) + text.flush()
        for line in lines.decode(rest) if rest else []:
            yield line
        for line in lines.flush():
            yield line

    def _response(self) -> httpx2.Response:
        """An ``httpx2.Response`` of the status and headers, for what httpx derives from them."""
        return httpx2.Response(self.status_code, headers=self.headers)

    async def _more(self) -> bool:
        """Reads and parses more of the body; False once the answer is complete."""
        if self._answer.complete:
            return False
        assert self._connection is not None, "read after close"
        data = await _receive(self._connection)
        if not data:
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
        _feed(self._answer, data)
        return True

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._answer.complete and self._answer.keep_alive:
            await self._owner._release(connection)
        else:
            await self._owner._discard(connection)


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
            try:
                await connection.stream.send(request)
            except (OSError, anyio.BrokenResourceError) as exc:
                await self._discard(connection)
                if attempt == RESENDS:
                    raise httpx2.WriteError(str(exc)) from exc
                continue  # not written: the upstream cannot have acted on it
            except BaseException:
                await self._discard(connection)
                raise
            return await self._answer(connection)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _answer(self, connection: _Connection) -> PlainResponse:
        answer = _Answer()
        answer.parser = httptools.HttpResponseParser(answer)
        try:
            while not answer.headers_done:
                data = await _receive(connection)
                if not data:
                    raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
                _feed(answer, data)
        except BaseException:
            await self._discard(connection)
            raise
        response = PlainResponse(self, connection, answer)
        if "set-cookie" in response.headers:
            request = httpx2.Request("POST", self.url)
            jarred = httpx2.Response(response.status_code, headers=response.headers, request=request)
            self.client.cookies.extract_cookies(jarred)
        return response

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now, self.keepalive_expiry):
                return connection
            await self._discard(connection)
        self._open += 1
        try:
            with anyio.fail_after(self.client.timeout.connect):
                stream = await anyio.connect_tcp(self._host, self._port)
        except TimeoutError as exc:
            self._open -= 1
            raise httpx2.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            self._open -= 1
            raise httpx2.ConnectError(str(exc)) from exc
        except BaseException:
            self._open -= 1
            raise
        return _Connection(stream, stream.extra(anyio.abc.SocketAttribute.raw_socket))  # noqa: S610 (anyio, not Django)

    async def _release(self, connection: _Connection) -> None:
        if self._closed or len(self._idle) >= self.max_keepalive:
            await self._discard(connection)
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    async def _discard(self, connection: _Connection) -> None:
        self._open -= 1
        with anyio.CancelScope(shield=True):
            await connection.stream.aclose()

    async def aclose(self) -> None:
        """Closes the idle connections; requests under way close theirs when they end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await self._discard(connection)


async def _receive(connection: _Connection) -> bytes:
    """The next bytes on the connection; b"" once the upstream has closed it."""
    try:
        return await connection.stream.receive(READ_SIZE)
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""
    except OSError as exc:
        raise httpx2.ReadError(str(exc)) from exc


def _feed(answer: _Answer, data: bytes) -> None:
    assert answer.parser is not None
    try:
        answer.parser.feed_data(data)
    except httptools.HttpParserError as exc:
        raise httpx2.RemoteProtocolError(str(exc)) from exc


__all__ = ["PlainHttp", "PlainResponse"]
