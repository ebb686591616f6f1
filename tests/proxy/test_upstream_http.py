"""The proxy's upstream HTTP client sends a request again only when the upstream cannot have received
it (issue 15): a POST whose answer was lost is never sent twice; a GET whose answer never began, and
a request that never left, are.

The servers are real sockets on loopback that drop the connection at a chosen point.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from proxy.upstream_http import ResendUnsent, never_received, upstream_http_client
from tests.support.raw_http import RawServer, read_request

pytestmark = pytest.mark.anyio
TIMEOUT = httpx2.Timeout(10.0)


class Dropper(RawServer):
    """Reads each connection's request; drops the connection without an answer for the first
    ``drops`` requests, then answers 200."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.received: list[bytes] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            request = read_request(conn)
            if request is None:
                return
            self.received.append(request[0].split(b"\r\n", 1)[0])
            if len(self.received) > self.drops:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")


@pytest.fixture
def dropper() -> Iterator[Dropper]:
    server = Dropper(drops=1)
    yield server
    server.close()


async def test_a_post_whose_answer_was_lost_is_not_sent_again(dropper: Dropper) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        with pytest.raises(httpx2.TransportError):
            await client.post(f"http://127.0.0.1:{dropper.port}/mcp", json={"method": "tools/call"})
    assert dropper.received == [b"POST /mcp HTTP/1.1"], "a call the upstream received was sent twice"


async def test_a_get_whose_answer_never_began_is_sent_again(dropper: Dropper) -> None:
    async with upstream_http_client(TIMEOUT) as client:
        answer = await client.get(f"http://127.0.0.1:{dropper.port}/mcp")
    assert answer.status_code == 200
    assert dropper.received == [b"GET /mcp HTTP/1.1"] * 2


async def test_a_request_that_never_left_is_sent_again_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again: nothing listens there
    events: list[str] = []

    async def trace(name: str, info: dict[str, Any]) -> None:
        events.append(name)

    async with upstream_http_client(TIMEOUT) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.post(f"http://127.0.0.1:{port}/mcp", json={}, extensions={"trace": trace})
    assert events.count("connection.connect_tcp.failed") == 2


class FailsOnce(httpx2.AsyncBaseTransport):
    """A transport whose first attempt fails at the connection's write, before the headers are out."""

    def __init__(self) -> None:
        self.attempts = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.attempts += 1
        trace = request.extensions["trace"]
        await trace("http11.send_request_headers.started", {})
        if self.attempts == 1:
            await trace("http11.send_request_headers.failed", {})
            raise httpx2.ReadError("[Errno 104] Connection reset by peer")
        await trace("http11.send_request_headers.complete", {})
        return httpx2.Response(200)


async def test_a_post_reset_before_its_headers_were_written_is_sent_again() -> None:
    inner = FailsOnce()
    async with httpx2.AsyncClient(transport=ResendUnsent(inner)) as client:
        answer = await client.post("http://upstream.invalid/mcp", json={"method": "tools/call"})
    assert (answer.status_code, inner.attempts) == (200, 2)


@pytest.mark.parametrize(
    ("method", "events", "resend"),
    [
        ("POST", [], True),
        ("POST", ["http11.send_request_headers.failed"], True),
        ("POST", ["http11.send_request_headers.complete"], False),
        ("DELETE", ["http11.send_request_headers.complete"], False),
        ("GET", ["http11.send_request_headers.complete"], True),
        ("GET", ["http11.send_request_headers.complete", "http11.receive_response_headers.complete"], False),
    ],
)
def test_what_may_be_sent_again(method: str, events: list[str], resend: bool) -> None:
    assert never_received(method, events) is resend
