"""The lean relay: a 2026-07-28 ``tools/call`` over HTTP answered without the SDK's server machinery.

A bare SDK relay costs about 2 ms of CPU a call before the guard does anything (docs/proxy.md,
"Where a passthrough read's time goes"). :class:`LeanRelay` sits innermost in the ``/mcp`` chain
(after the body limit, agent auth, the replica front and session renewal) and takes exactly one
kind of request: a single JSON-RPC ``POST`` whose ``MCP-Protocol-Version`` is a 2026-07-28 version
and whose method is ``tools/call``, from a client that declared none of elicitation, sampling and
roots (so no input round can arise: neither the guard's approval rounds nor an upstream's), with no
progress token, log-level opt-in, ``Mcp-Param-*`` header, retried round or task-only tool. Its body
is parsed once and checked with the SDK's own public ladder (``classify_inbound_request``,
``parse_client_request``), the call runs through :meth:`proxy.server.GuardProxy.call_tool` (the
very function the SDK handler calls) and the answer is written as the SDK writes it: the same
result sieve (``serialize_server_result``, as :mod:`proxy.result_surface` runs it), ``resultType``,
``serverInfo`` stamp, JSON-RPC envelope, status and headers (the JSON compact UTF-8, by
:mod:`proxy.wire_json`); after ``SSE_COMMIT_S`` without an answer the response commits to SSE with
keep-alive pings, and a client that disconnects cancels the call, as on the SDK's path (noticed from
``WATCH_AFTER_S`` into the call: docs/adr/017).

Every other request, and any request the ladder or the params model refuses, is dispatched to the
SDK app unchanged (its body replayed): the SDK answers refusals, so their codes and messages are
the SDK's own. ``proxy.lean_relay: false`` turns the lean relay off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server.runner import modern_error_data
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS, InboundModernRoute, classify_inbound_request
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as mcp_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy import result_surface, telemetry, wire_json
from proxy.lean_upstream import DECLARED_NOTHING
from proxy.relay import LOG_LEVEL_META_KEY

if TYPE_CHECKING:
    from proxy.server import GuardProxy

logger = logging.getLogger(__name__)

SSE_COMMIT_S = 15.0
"""A call not answered within this long commits to SSE and pings (the SDK's ``_SSE_PING_INTERVAL``)."""
WATCH_AFTER_S = 0.05
"""A call still running after this long gets a watch over its client (:func:`answer_call`)."""
_ROUND_CAPABILITIES = ("elicitation", "sampling", "roots")
_ROUND_PARAMS = ("inputResponses", "requestState")
_PROGRESS_KEYS = ("progressToken", "progress_token")
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]


class LeanRelay:
    """ASGI stage in front of the SDK's ``/mcp`` app; see the module docstring for what it takes.

    ``calls`` counts the calls it answered (a test and ``/metrics`` can tell the lean path ran).
    """

    def __init__(self, app: ASGIApp, proxy: GuardProxy, *, enabled: bool = True) -> None:
        self.app = app
        self.proxy = proxy
        self.enabled = enabled
        self.calls = 0
        self._security: TransportSecurityMiddleware | None = None
        self._passed: set[tuple[bytes | None, ...]] = set()
        """(content type, host, origin) header values the transport security let pass (:meth:`_secure`)."""
        self._stamp: dict[str, Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._may_take(scope) or not await self._secure(scope):
            await self.app(scope, receive, send)
            return
        body, disconnected = await _read_body(receive)
        if disconnected:
            return
        taken = self._take(scope, body)
        if taken is None:
            await self.app(scope, _replay(body, receive), send)
            return
        self.calls += 1
        telemetry.record_relay_call("lean_agent")
        await self._answer(scope, receive, send, *taken)

    async def _secure(self, scope: Scope) -> bool:
        """The SDK's transport security (Host and Origin against DNS rebinding) passes; else the SDK
        app answers the request with its own refusal.

        Its verdict on a POST depends only on the first Content-Type, Host and Origin headers, so a
        combination it let pass is remembered (at most :data:`_PASSED_MAX`) and not asked again; one
        it refuses is asked every time (the SDK logs each refusal)."""
        key = _security_key(scope["headers"])
        if key in self._passed:
            return True
        if self._security is None:
            settings = self.proxy.server.session_manager.security_settings
            self._security = TransportSecurityMiddleware(settings)
        if await self._security.validate_request(Request(scope), is_post=True) is not None:
            return False
        if len(self._passed) < _PASSED_MAX:
            self._passed.add(key)
        return True

    def _may_take(self, scope: Scope) -> bool:
        """The request line and headers allow the lean path (the body decides the rest)."""
        if not self.enabled or scope["type"] != "http" or scope["method"] != "POST":
            return False
        if self.proxy.relay.sole_agent:
            return False  # a stdio proxy's upstream requests go to its one agent: the SDK's path
        version = accept = content_type = None
        for key, value in scope["headers"]:
            if key == b"mcp-protocol-version":
                version = value
            elif key == b"accept":
                accept = value
            elif key == b"content-type":
                content_type = value
            elif key.startswith(b"mcp-param-"):
                return False
        if version is None or version.decode("latin-1") not in MODERN_PROTOCOL_VERSIONS:
            return False
        if accept is None or b"application/json" not in accept or b"text/event-stream" not in accept:
            return False
        return content_type is not None and content_type.startswith(b"application/json")

    def _take(
        self, scope: Scope, body: bytes
    ) -> tuple[Any, InboundModernRoute, types.CallToolRequestParams, types.ClientCapabilities] | None:
        """(request id, ladder verdict, params, capabilities) of a request the lean path answers;
        None: the SDK's (another method, a batch, a refusal of the ladder, a round, ...)."""
        try:
            decoded = wire_json.loads(body)
        except (ValueError, RecursionError):
            return None
        if (
            not isinstance(decoded, dict)
            or decoded.get("method") != "tools/call"
            or decoded.get("jsonrpc") != "2.0"
        ):
            return None
        request_id = decoded.get("id")
        params = decoded.get("params")
        if (
            isinstance(request_id, bool)
            or not isinstance(request_id, str | int)
            or not isinstance(params, dict)
        ):
            return None
        if any(key in params for key in _ROUND_PARAMS) or not self._plain_call(params):
            return None
        verdict = classify_inbound_request(decoded, headers=_ladder_headers(scope["headers"]))
        if not isinstance(verdict, InboundModernRoute):
            return None
        try:
            declared = verdict.client_capabilities
            capabilities = (
                DECLARED_NOTHING  # one shared model for the client that declared nothing (most agents)
                if declared == {}
                else types.ClientCapabilities.model_validate(declared, by_name=False)
            )
            request = mcp_methods.parse_client_request("tools/call", verdict.protocol_version, params)
        except (ValidationError, ValueError, KeyError):
            return None
        if any(getattr(capabilities, name, None) is not None for name in _ROUND_CAPABILITIES):
            return None
        call_params = request.params
        if not isinstance(call_params, types.CallToolRequestParams):
            return None
        return request_id, verdict, call_params, capabilities

    def _plain_call(self, params: Mapping[str, Any]) -> bool:
        """No progress token, no log-level opt-in, not a tool that runs only as an MCP task."""
        meta = params.get("_meta")
        if not isinstance(meta, Mapping):
            return False
        if any(meta.get(key) is not None for key in _PROGRESS_KEYS) or LOG_LEVEL_META_KEY in meta:
            return False
        route = self.proxy.routes.get(params.get("name"))  # type: ignore[arg-type]
        execution = route.tool.execution if route is not None else None
        return execution is None or execution.task_support != "required"

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: Any,
        verdict: InboundModernRoute,
        params: types.CallToolRequestParams,
        capabilities: types.ClientCapabilities,
    ) -> None:
        """Run the guarded call, cancelled if the client goes away; answer JSON, or SSE once it is slow."""
        from proxy.server import AgentRequest

        meta: dict[str, Any] = dict(params.meta) if params.meta is not None else {}
        request = AgentRequest(meta=meta, modern=True, scope=scope, client_capabilities=capabilities)
        await answer_call(
            receive, send, lambda: self._envelope(request_id, verdict.protocol_version, request, params)
        )

    async def _envelope(
        self, request_id: Any, version: str, request: Any, params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        """The JSON-RPC response (or error) to the call, shaped as the SDK's server runner shapes it."""
        try:
            result = await self.proxy.call_tool(request, params)
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            dumped = result_surface.sieve(version, dumped)
        except Exception as exc:
            if not isinstance(exc, MCPError):
                logger.exception("tools/call failed on the lean relay")
            error = modern_error_data(exc).model_dump(by_alias=True, mode="json", exclude_none=True)
            return {"jsonrpc": "2.0", "id": request_id, "error": error}
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        if self._stamp is None:
            # The SDK's property deep-copies its once-made dump on every read so that a caller who
            # mutates it cannot corrupt later answers; this one is only ever encoded, never mutated.
            self._stamp = self.proxy.server.server_info_stamp
        meta = dumped.get("_meta")
        if meta is None:
            dumped["_meta"] = {SERVER_INFO_META_KEY: self._stamp}
        elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
            dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: self._stamp}
        return {"jsonrpc": "2.0", "id": request_id, "result": dumped}


_LADDER_HEADERS = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")


def _ladder_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The headers ``classify_inbound_request`` reads (protocol version, method, name), by lowercase
    name, the last of each as a dict of all headers would hold it; the others are not decoded."""
    return {
        key.decode("latin-1"): value.decode("latin-1") for key, value in headers if key in _LADDER_HEADERS
    }


_SECURITY_HEADERS = (b"content-type", b"host", b"origin")
_PASSED_MAX = 64
"""Header combinations :meth:`LeanRelay._secure` remembers as passed (a deployment sees a handful)."""


def _security_key(headers: list[tuple[bytes, bytes]]) -> tuple[bytes | None, ...]:
    """The first value of each of :data:`_SECURITY_HEADERS` (None: absent), as starlette reads them."""
    found: dict[bytes, bytes] = {}
    for key, value in headers:
        if key in _SECURITY_HEADERS and key not in found:
            found[key] = value
    return tuple(found.get(name) for name in _SECURITY_HEADERS)


async def answer_call(
    receive: Receive, send: Send, envelope: Callable[[], Awaitable[dict[str, Any]]]
) -> None:
    """Awaits ``envelope()`` (the JSON-RPC answer) in this task and writes it as JSON; a client that
    disconnects first cancels it, and after :data:`SSE_COMMIT_S` without it the response commits to
    SSE, with a ping every :data:`SSE_COMMIT_S`, and the answer is its one event.

    The watch over the client (and the pings) is a plain asyncio task, not an anyio task group with
    the call in a second task: on issue 18's profile that structure cost about 90 µs a call, against
    about 10 µs for this one. It starts only once the call has run :data:`WATCH_AFTER_S` (a timer
    until then): most calls are answered sooner and need no task at all, and a client that left in
    the meantime is noticed as soon as it starts (its ``receive`` answers the disconnect at once).
    The watch cancels the call through an anyio cancel scope, so shielded scopes within the call (a
    sessionless read's rollback) hold; it runs no anyio code itself, so cancelling it natively is safe."""
    reply = _Reply(send)
    call = anyio.CancelScope()
    loop = asyncio.get_running_loop()
    delay = min(WATCH_AFTER_S, SSE_COMMIT_S)
    watch: asyncio.Task[None] | None = None

    def start_watch() -> None:
        nonlocal watch
        watch = loop.create_task(_watch(receive, call, reply, SSE_COMMIT_S - delay))
        watch.add_done_callback(_watch_ended)

    def stop_watching() -> None:
        timer.cancel()
        if watch is not None:
            watch.cancel()

    timer = loop.call_later(delay, start_watch)
    answer: dict[str, Any] | None = None
    try:
        with call:
            answer = await envelope()
    except BaseException:
        stop_watching()
        raise
    timer.cancel()
    if answer is None:
        return  # the client went away (the watch cancelled the call, then ended)
    if not reply.sse:
        stop_watching()  # it wrote nothing, and a cancelled task never resumes to write
        await _write_json(answer, send)
        return
    async with reply.lock:  # a ping being written is written whole first
        stop_watching()
        event = b"event: message\r\ndata: " + wire_json.dumps(answer) + b"\r\n\r\n"
        await send({"type": "http.response.body", "body": event, "more_body": False})


@dataclass
class _Reply:
    """What the watch has written: nothing, or the SSE headers (``sse``) and pings, each under ``lock``."""

    send: Send
    sse: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


async def _watch(receive: Receive, call: anyio.CancelScope, reply: _Reply, first_s: float) -> None:
    """Cancels ``call`` when the client disconnects; ``first_s`` and then each :data:`SSE_COMMIT_S`
    without that, commits the response to SSE (the first time) and pings."""
    wait_s = first_s
    while True:
        try:
            async with asyncio.timeout(wait_s):
                while (await receive())["type"] != "http.disconnect":
                    pass  # pragma: no cover
        except TimeoutError:
            async with reply.lock:
                if not reply.sse:
                    reply.sse = True
                    await reply.send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                await reply.send({"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True})
            wait_s = SSE_COMMIT_S
            continue
        call.cancel()
        return


def _watch_ended(watch: asyncio.Task[None]) -> None:
    """A watch that failed (its ``receive`` raised) is logged, not left for asyncio to report at
    collection; the call then runs on without it, as a call whose client stays."""
    if not watch.cancelled() and (exc := watch.exception()) is not None:
        logger.error("the lean relay's watch over a client failed", exc_info=exc)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body (the body limit in front has bounded it), and whether the client left."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", True
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's further messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _write_json(envelope: dict[str, Any], send: Send) -> None:
    """As the SDK writes a modern answer: compact JSON, the error code's HTTP status."""
    error = envelope.get("error")
    status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200) if error is not None else 200
    body = wire_json.dumps(envelope)
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["SSE_COMMIT_S", "WATCH_AFTER_S", "LeanRelay", "answer_call"]
