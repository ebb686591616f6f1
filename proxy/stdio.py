"""The stdio transport of the agent-facing server: the SDK's, plus answers to lines that are not JSON-RPC.

The SDK's ``stdio_server`` hands a line it cannot parse to the server as an exception, and the server
drops it with a debug log: a client that sent it waits forever. JSON-RPC 2.0 says such a line is
answered with an error whose id is null: ``-32700`` (parse error) when the line is not JSON,
``-32600`` (invalid request) when it is JSON but not a JSON-RPC message. This module relays the
SDK's streams and answers those lines; everything else (the SDK's claim of fds 0 and 1 so that
stray output cannot corrupt the wire included) is the SDK's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

Incoming = SessionMessage | Exception


def error_for(exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC error answering a line the transport could not turn into a message."""
    not_json = isinstance(exc, ValidationError) and any(e["type"] == "json_invalid" for e in exc.errors())
    if not_json:
        error = types.ErrorData(code=types.PARSE_ERROR, message="Parse error: the line is not JSON")
    else:
        error = types.ErrorData(
            code=types.INVALID_REQUEST, message="Invalid Request: the line is not a JSON-RPC 2.0 message"
        )
    return types.JSONRPCError(jsonrpc="2.0", id=None, error=error)


async def _relay(source: Any, target: MemoryObjectSendStream[Incoming], replies: Any) -> None:
    async with target:
        async for item in source:
            if isinstance(item, Exception):
                try:
                    await replies.send(SessionMessage(error_for(item)))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the server is done writing: the connection is ending
                continue
            try:
                await target.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[MemoryObjectReceiveStream[Incoming], Any]]:
    """(read, write) streams for ``Server.run`` on this process's stdin/stdout."""
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[Incoming](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_relay, read_stream, send, write_stream)
            try:
                yield receive, write_stream
            finally:
                tg.cancel_scope.cancel()
