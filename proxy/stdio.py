"""The stdio transport of the agent-facing server: the SDK's, plus answers to lines that are not JSON-RPC.

The SDK's ``stdio_server`` hands a line it cannot parse to the server as an exception, and the server
drops it with a debug log: a client that sent it waits forever. JSON-RPC 2.0 says such a line is
answered with an error whose id is null: ``-32700`` (parse error) when the line is not JSON,
``-32600`` (invalid request) when it is JSON but not a JSON-RPC message. This module relays the
SDK's streams and answers those lines, and bounds the length of a line (``http.max_body_bytes``, the
limit of an HTTP body: a longer line is skipped and answered ``-32600``); everything else (the SDK's
claim of fd 1 so that stray output cannot corrupt the wire included) is the SDK's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

Incoming = SessionMessage | Exception


OVERSIZED = "shadowguard/oversized-line"
"""Key of the stand-in a line over the limit is replaced by (its size in bytes); never a message."""
_SKIP_CHUNK = 64 * 1024


def _oversized(exc: Exception) -> int | None:
    if not isinstance(exc, ValidationError):
        return None
    for error in exc.errors():
        value = error.get("input")
        if isinstance(value, dict) and isinstance(value.get(OVERSIZED), int):
            return int(value[OVERSIZED])
    return None


def error_for(exc: Exception, max_line_bytes: int | None = None) -> types.JSONRPCError:
    """The JSON-RPC error answering a line the transport could not turn into a message."""
    size = _oversized(exc)
    if size is not None:
        limit = f" of {max_line_bytes} bytes" if max_line_bytes is not None else ""
        error = types.ErrorData(
            code=types.INVALID_REQUEST,
            message=f"Invalid Request: the line is {size} bytes, over the limit{limit} (http.max_body_bytes)",
        )
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
    not_json = isinstance(exc, ValidationError) and any(e["type"] == "json_invalid" for e in exc.errors())
    if not_json:
        error = types.ErrorData(code=types.PARSE_ERROR, message="Parse error: the line is not JSON")
    else:
        error = types.ErrorData(
            code=types.INVALID_REQUEST, message="Invalid Request: the line is not a JSON-RPC 2.0 message"
        )
    return types.JSONRPCError(jsonrpc="2.0", id=None, error=error)


class BoundedLines:
    """A binary stream read as text lines of at most ``max_bytes`` each (the SDK's reader iterates it).

    A longer line is read to its end without being kept and replaced by a small stand-in that is not a
    JSON-RPC message, answered with ``-32600`` naming the limit: memory and parsing work per line are
    bounded whatever the client sends.
    """

    def __init__(self, binary: BinaryIO, max_bytes: int) -> None:
        self._file = binary
        self.max_bytes = max_bytes

    async def _readline(self, limit: int) -> bytes:
        return await anyio.to_thread.run_sync(self._file.readline, limit, abandon_on_cancel=True)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await self._readline(self.max_bytes + 1)
            if not line:
                return
            if len(line) > self.max_bytes and not line.endswith(b"\n"):
                size = len(line)
                while True:
                    rest = await self._readline(_SKIP_CHUNK)
                    size += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                yield json.dumps({OVERSIZED: size})
                continue
            yield line.decode("utf-8", errors="replace")


async def _relay(
    source: Any, target: MemoryObjectSendStream[Incoming], replies: Any, max_line_bytes: int | None
) -> None:
    async with target:
        async for item in source:
            if isinstance(item, Exception):
                try:
                    await replies.send(SessionMessage(error_for(item, max_line_bytes)))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the server is done writing: the connection is ending
                continue
            try:
                await target.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


@asynccontextmanager
async def stdio_streams(
    max_line_bytes: int | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Incoming], Any]]:
    """(read, write) streams for ``Server.run`` on this process's stdin/stdout; with
    ``max_line_bytes``, stdin is read as :class:`BoundedLines` (the SDK then leaves fd 0 as it is)."""
    stdin = BoundedLines(sys.stdin.buffer, max_line_bytes) if max_line_bytes is not None else None
    async with stdio_server(stdin=cast(Any, stdin)) as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[Incoming](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_relay, read_stream, send, write_stream, max_line_bytes)
            try:
                yield receive, write_stream
            finally:
                tg.cancel_scope.cancel()
