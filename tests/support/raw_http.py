"""HTTP/1.1 upstreams made of a bare socket on loopback, for tests of what a client does when the
upstream drops a connection at a chosen point (proxy.upstream_http, proxy.lean_http): a subclass of
:class:`RawServer` says what becomes of each connection, :func:`read_request` reads one request."""

from __future__ import annotations

import socket
import threading
from typing import Self

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
"""A keep-alive answer whose body is ``{}``."""


class RawServer:
    """Accepts connections one at a time on a thread of its own and gives each to :meth:`handle`,
    which owns it: closes it, or keeps it open. A subclass sets its own attributes before calling
    ``__init__``, which starts the thread."""

    def __init__(self) -> None:
        self.accepted = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_request(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """One request's head (request line and headers) and body, read to its ``content-length``;
    None when the client closed the connection first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head, body
