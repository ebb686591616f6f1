"""proxy.http_writes: the agent side's answers leave in one write (headers and body together), with
the same bytes; closing sends what is pending first, aborting drops it. Real sockets, and a real
uvicorn server with the protocol."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from proxy.http_writes import CoalescingHttpTools, CoalescingTransport

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Writes:
    """The writes that reach the real transport."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.seen: list[bytes] = []
        original = transport.write

        def write(data: Any) -> None:
            self.seen.append(bytes(data))
            original(data)

        transport.write = write  # type: ignore[method-assign]


async def _pair() -> tuple[socket.socket, asyncio.Transport]:
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    theirs.setblocking(False)
    return theirs, transport


async def _read_all(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    chunks = []
    while chunk := await loop.sock_recv(sock, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_writes_of_one_turn_leave_as_one() -> None:
    peer, transport = await _pair()
    writes = Writes(transport)
    coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
    coalescing.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    coalescing.write(b"")
    coalescing.write(bytearray(b"ok"))
    assert writes.seen == [] and coalescing.get_write_buffer_size() == 40
    await asyncio.sleep(0)
    assert writes.seen == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    coalescing.write(b"next")
    await asyncio.sleep(0)
    assert writes.seen[1:] == [b"next"]
    coalescing.close()
    assert await _read_all(peer) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\noknext"
    peer.close()


async def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    peer, transport = await _pair()
    coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
    coalescing.write(b"last words")
    coalescing.close()
    assert await _read_all(peer) == b"last words"
    peer.close()

    peer, transport = await _pair()
    coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
    coalescing.write(b"never sent")
    coalescing.abort()
    await asyncio.sleep(0)
    assert await _read_all(peer) == b""
    peer.close()


async def test_uvicorn_answers_through_it_in_one_write() -> None:
    """A real uvicorn server with the protocol: two keep-alive requests on one connection, each
    answer complete and correct, and each in one segment (the first read holds all of it)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = scope["path"].encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, http=CoalescingHttpTools, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for path in ("/one", "/two"):
            writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            await writer.drain()
            first = await reader.read(65536)
            head, _, body = first.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK") and b"content-length: 4" in head
            assert body == path.encode()
    finally:
        writer.close()
        server.should_exit = True
        await serving
