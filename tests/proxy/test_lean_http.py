"""The lean path's own HTTP/1.1 connections (proxy/lean_http.py) against real servers on loopback:
kept alive and reused, never used once the upstream closed them, a request that could not be
written sent again once, a request whose answer was lost never sent again, the headers and answers
httpx would give, cookies into the client's jar, and what it leaves to httpx."""

from __future__ import annotations

import functools
import gzip
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import anyio
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy import lean_http
from proxy.lean_http import PlainHttp
from proxy.upstream_http import upstream_http_client, upstream_http_limits
from tests.support.processes import serving
from tests.support.raw_http import ANSWER, RawServer, read_request

pytestmark = pytest.mark.anyio
TIMEOUT = httpx2.Timeout(10.0)
CLIENTS: list[str] = []
HEADERS: list[dict[str, str]] = []
SSE_PIECES = [b'event: message\r\ndata: {"a": "\xc3', b'\xa9"}\r', b"\n\r\n: ping\n\n", b"data: 2\n\n"]


async def echo(request: Request) -> Response:
    await request.body()
    assert request.client is not None
    CLIENTS.append(f"{request.client.host}:{request.client.port}")
    HEADERS.append(dict(request.headers))
    return JSONResponse({"ok": True})


async def slow(request: Request) -> Response:
    await anyio.sleep(0.1)  # long enough that every request of a burst is under way at once
    return await echo(request)


async def cookie(request: Request) -> Response:
    response = JSONResponse({"ok": True})
    response.set_cookie("lb", "replica-2")
    response.set_cookie("zone", "b")  # two Set-Cookie headers: each is its own cookie
    return response


async def stream(request: Request) -> Response:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in SSE_PIECES:
            yield piece

    return StreamingResponse(pieces(), media_type="text/event-stream")


async def compressed(request: Request) -> Response:
    return Response(
        gzip.compress(b'{"ok": true}'), media_type="application/json", headers={"content-encoding": "gzip"}
    )


APP = Starlette(
    routes=[
        Route("/echo", echo, methods=["POST"]),
        Route("/slow", slow, methods=["POST"]),
        Route("/cookie", cookie, methods=["POST"]),
        Route("/stream", stream, methods=["POST"]),
        Route("/compressed", compressed, methods=["POST"]),
    ]
)


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serving(APP) as url:
        yield url


def plain(client: httpx2.AsyncClient, url: str) -> PlainHttp:
    limits = upstream_http_limits()
    return PlainHttp(
        httpx2.URL(url),
        client,
        keepalive_expiry=limits.keepalive_expiry or 0.0,
        max_connections=limits.max_connections or 1,
        max_keepalive=limits.max_keepalive_connections or 0,
    )


async def post(http: PlainHttp, headers: dict[str, str] | None = None, content: bytes = b"{}") -> bytes:
    response = await http.post(content, {"content-type": "application/json", **(headers or {})})
    try:
        return await response.read()
    finally:
        await response.close()


async def test_requests_share_one_kept_alive_connection(base: str) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        http = plain(client, f"{base}/echo")
        CLIENTS.clear()
        for _ in range(3):
            assert await post(http) == b'{"ok":true}'
        await http.aclose()
    assert len(CLIENTS) == 3 and len(set(CLIENTS)) == 1


async def test_every_connection_of_a_burst_is_kept_for_the_next(base: str) -> None:
    """32 requests at once open 32 connections; the next 32 reuse them all (httpx's default of 20
    idle connections closed 12 after each burst and opened 12 anew: issue 18)."""
    async with upstream_http_client(TIMEOUT) as client:
        http = plain(client, f"{base}/slow")
        bursts: list[set[str]] = []
        for _ in range(2):
            CLIENTS.clear()
            async with anyio.create_task_group() as tg:
                for _ in range(32):
                    tg.start_soon(post, http)
            bursts.append(set(CLIENTS))
        await http.aclose()
    assert len(bursts[0]) == 32 and bursts[1] == bursts[0]


async def test_the_upstream_sees_what_httpx_sends_but_accept_encoding(base: str) -> None:
    headers = {"accept": "application/json, text/event-stream", "mcp-method": "tools/call"}
    async with upstream_http_client(TIMEOUT) as client:
        await client.post(
            f"{base}/echo", content=b"{}", headers={"content-type": "application/json", **headers}
        )
        http = plain(client, f"{base}/echo")
        await post(http, headers)
        await http.aclose()
    by_httpx, by_plain = HEADERS[-2], HEADERS[-1]
    assert by_httpx.pop("accept-encoding") == "gzip, deflate, br"
    assert by_plain == by_httpx


async def test_an_event_stream_is_split_into_lines_as_httpx_splits_it(base: str) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        async with client.stream("POST", f"{base}/stream", content=b"{}") as answer:
            expected = [line async for line in answer.aiter_lines()]
        http = plain(client, f"{base}/stream")
        response = await http.post(b"{}", {})
        lines = [line async for line in response.iter_lines()]
        await response.close()
        await http.aclose()
    assert lines == expected == ["event: message", 'data: {"a": "é"}', "", ": ping", "", "data: 2", ""]


async def test_a_compressed_answer_is_decoded(base: str) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        http = plain(client, f"{base}/compressed")
        assert await post(http) == b'{"ok": true}'
        await http.aclose()


async def test_a_cookie_goes_into_the_clients_jar_and_then_httpx_sends(base: str) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        http = plain(client, f"{base}/cookie")
        assert http.takes(10)
        await post(http)
        await http.aclose()
        assert client.cookies.get("lb") == "replica-2"
        assert client.cookies.get("zone") == "b"
        assert not http.takes(10)


async def test_what_it_leaves_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        assert plain(client, "http://127.0.0.1:1/mcp").takes(10)
        assert not plain(client, "https://127.0.0.1:1/mcp").takes(10)
        assert not plain(client, "http://127.0.0.1:1/mcp").takes(11)  # past the client's read timeout

        async def hook(request: httpx2.Request) -> None:
            """An event hook httpx would call."""

        client.event_hooks["request"].append(hook)
        assert not plain(client, "http://127.0.0.1:1/mcp").takes(10)
        client.event_hooks["request"].remove(hook)
        monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
        assert not plain(client, "http://127.0.0.1:1/mcp").takes(10)


class OneShot(RawServer):
    """Reads each connection's request, then answers it keep-alive and closes the connection all the
    same (``answer``), or closes it without an answer."""

    def __init__(self, *, answer: bool) -> None:
        self.answer = answer
        self.requests = 0
        self.closed = threading.Event()
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            if read_request(conn) is not None:
                self.requests += 1
                if self.answer:
                    conn.sendall(ANSWER)
        self.closed.set()


class KeptAlive(RawServer):
    """Answers the first request of each connection keep-alive; then ``drop`` reads the next request
    and closes the connection without an answer, ``hold`` reads nothing more and leaves the
    connection open until the server closes (so the client's socket never becomes readable)."""

    def __init__(self, then: Literal["drop", "hold"]) -> None:
        self.then = then
        self.bodies: list[bytes] = []
        self.held: list[socket.socket] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        request = read_request(conn)
        if request is None:
            conn.close()
            return
        self.bodies.append(request[1])
        if self.then == "hold":
            self.held.append(conn)  # before the answer: the test closes the server once it has it
            conn.sendall(ANSWER)
            return
        with conn:
            conn.sendall(ANSWER)
            request = read_request(conn)
            if request is not None:
                self.bodies.append(request[1])

    def close(self) -> None:
        super().close()
        for conn in self.held:
            conn.close()


async def test_an_idle_connection_the_upstream_closed_is_not_used() -> None:
    server = OneShot(answer=True)
    try:
        async with upstream_http_client(TIMEOUT) as client:
            http = plain(client, server.url)
            for _ in range(2):
                server.closed.clear()
                assert await post(http) == b"{}"
                assert server.closed.wait(10)
            await http.aclose()
    finally:
        server.close()
    assert (server.accepted, server.requests) == (2, 2)


async def test_a_post_whose_answer_was_lost_is_not_sent_again() -> None:
    server = OneShot(answer=False)
    try:
        async with upstream_http_client(TIMEOUT) as client:
            http = plain(client, server.url)
            with pytest.raises(httpx2.RemoteProtocolError):
                await post(http)
            await http.aclose()
    finally:
        server.close()
    assert server.requests == 1


async def test_an_upstream_that_is_not_there_is_a_connect_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    async with upstream_http_client(TIMEOUT) as client:
        with pytest.raises(httpx2.ConnectError):
            await post(plain(client, f"http://127.0.0.1:{port}/mcp"))


def break_idle_connections(http: PlainHttp) -> None:
    """Makes the idle connections unwritable while they still pass the check before use (open, and
    nothing to read): as when the upstream's reset arrives between that check and the write."""
    for connection in http._idle:
        assert connection.transport is not None
        connection.transport.get_extra_info("socket").shutdown(socket.SHUT_WR)


async def test_a_request_that_could_not_be_written_is_sent_again_on_a_new_connection() -> None:
    with KeptAlive(then="hold") as server:
        async with upstream_http_client(TIMEOUT) as client:
            http = plain(client, server.url)
            assert await post(http, content=b'{"n": 1}') == b"{}"
            break_idle_connections(http)
            assert await post(http, content=b'{"n": 2}') == b"{}"
            await http.aclose()
    assert server.bodies == [b'{"n": 1}', b'{"n": 2}']
    assert server.accepted == 2


async def test_a_request_is_sent_again_once_at_most() -> None:
    with KeptAlive(then="hold") as server:
        async with upstream_http_client(TIMEOUT) as client:
            http = plain(client, server.url)
            async with anyio.create_task_group() as group:
                for n in (1, 2):
                    group.start_soon(functools.partial(post, http, content=b'{"n": %d}' % n))
            break_idle_connections(http)  # two of them: the request's first attempt and its resend
            with pytest.raises(httpx2.WriteError):
                await post(http, content=b'{"n": 3}')
            await http.aclose()
    assert sorted(server.bodies) == [b'{"n": 1}', b'{"n": 2}']
    assert server.accepted == 2


async def test_a_request_written_on_a_kept_alive_connection_whose_answer_was_lost_is_not_sent_again() -> None:
    with KeptAlive(then="drop") as server:
        async with upstream_http_client(TIMEOUT) as client:
            http = plain(client, server.url)
            assert await post(http, content=b'{"n": 1}') == b"{}"
            with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
                await post(http, content=b'{"n": 2}')
            await http.aclose()
    assert server.bodies == [b'{"n": 1}', b'{"n": 2}']
    assert server.accepted == 1


def test_an_answers_headers_are_read_by_lower_case_name_repeated_ones_joined() -> None:
    raw = [("Content-Type", "application/json"), ("X-Tag", "a"), ("x-tag", "b")]
    assert lean_http._headers(raw) == dict(httpx2.Headers(raw).items())
    assert lean_http._headers(raw) == {"content-type": "application/json", "x-tag": "a, b"}
