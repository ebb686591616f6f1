"""One socket write per HTTP answer on the agent side.

uvicorn writes a response's status line and headers, then its body, each straight to the socket:
two ``send`` system calls, two TCP segments, and the agent's HTTP client woken twice. On loopback
each send also runs the receiving side's network stack, so on the proxy's hot path (docs/proxy.md,
"Performance") these writes were the largest single cost of a call. :class:`CoalescingHttpTools` is
uvicorn's httptools protocol whose transport gathers the writes made in one turn of the event loop
(a response's headers and body are written back to back) and sends them as one. Nothing else
changes: the bytes, their order, flow control, keep-alive and closing are uvicorn's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A transport whose writes in one turn of the event loop leave as one write of ``inner``.

    Writes are kept until the loop runs its next callbacks (``call_soon``), or until the transport
    is closed or its write side ended, which send them first; ``abort`` drops them with the
    connection. Everything else is ``inner``'s.
    """

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = inner
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [bytes(data)]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what was written since the last flush (nothing once the transport is closing)."""
        pending, self._pending = self._pending, None
        if pending and not self.inner.is_closing():
            self.inner.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        kept = sum(len(part) for part in self._pending or ())
        return self.inner.get_write_buffer_size() + kept

    def close(self) -> None:
        self.flush()
        self.inner.close()

    def write_eof(self) -> None:
        self.flush()
        self.inner.write_eof()

    def abort(self) -> None:
        self._pending = None
        self.inner.abort()

    def is_closing(self) -> bool:
        return self.inner.is_closing()

    def can_write_eof(self) -> bool:
        return self.inner.can_write_eof()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self.inner.pause_reading()

    def resume_reading(self) -> None:
        self.inner.resume_reading()

    def is_reading(self) -> bool:
        return self.inner.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.inner.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.inner.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.inner.get_protocol()


class CoalescingHttpTools(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol over a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)  # type: ignore[arg-type]
