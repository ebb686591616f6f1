"""A bound on every HTTP request body the proxy reads (``http.max_body_bytes``), on every path.

A body whose ``Content-Length`` is over the limit is refused before any of it is read; a streamed
body (no length) is counted as it arrives and refused once it passes the limit, before the
application holds it whole. The refusal is HTTP 413 with a JSON-RPC-shaped error (the ``/mcp``
clients' format; the REST clients read ``error.message``) naming the size, the limit and the config
key. Found by ``bench chaos`` (issue 15): the REST APIs had no bound, and ``/mcp`` answered a bare
"Request body too large".
"""

from __future__ import annotations

import json
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONFIG_KEY = "http.max_body_bytes"
logger = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    def __init__(self, size: int, limit: int, *, declared: bool) -> None:
        self.size, self.limit, self.declared = size, limit, declared
        more = "" if declared else "more than "
        super().__init__(
            f"Request body too large: {more}{size} bytes, over the limit of {limit} bytes ({CONFIG_KEY})"
        )


class BodyLimit:
    """ASGI middleware: HTTP request bodies of at most ``limit`` bytes."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"the body limit must be positive, got {limit}")
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = _framing(scope)
        if declared is not None and declared > self.limit:
            await _refuse(send, BodyTooLarge(declared, self.limit, declared=True))
            return
        if declared is not None and not chunked:
            # The HTTP server hands over exactly the declared length (the rest would be the next
            # request on the connection), so there is nothing to count.
            await self.app(scope, receive, send)
            return
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if started:
                        raise BodyTooLarge(seen, self.limit, declared=False)
                    refused = True
                    await _refuse(send, BodyTooLarge(seen, self.limit, declared=False))
                    return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the application's answer after the refusal goes nowhere
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception as exc:
            if not refused:
                raise
            # The application saw the client go (the refusal ended its body) and gave up.
            logger.info("request refused over %s; the application stopped with %r", CONFIG_KEY, exc)


def _framing(scope: Scope) -> tuple[int | None, bool]:
    """The request's ``Content-Length`` (None: absent or not a number) and whether it also names a
    ``Transfer-Encoding`` (then the length does not frame the body)."""
    length: int | None = None
    seen_length = chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and not seen_length:
            seen_length = True
            try:
                length = int(value)
            except ValueError:
                length = None
        elif name == b"transfer-encoding":
            chunked = True
    return length, chunked


async def _refuse(send: Send, exc: BodyTooLarge) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": str(exc)}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
